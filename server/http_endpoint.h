#pragma once
// HttpEndpoint: the server's small HTTP/1.0 port (server.metrics_port): Prometheus text on
// /metrics and the dashboard (server/dashboard.h). One thread serves one connection at a time
// with 1 s read and write timeouts, so a slow or stalled client costs the page at most that
// and never the gRPC server; it answers malformed requests itself (400, 405, 414, 431).
//
//   HttpEndpoint http([&](const HttpRequest& r) { return dashboard.Handle(r); });
//   int port = http.Start("127.0.0.1", 9100);  ...;  http.Stop();
//
// Thread-safety: Start/Stop from one thread; the handler runs on the endpoint's thread.
#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

namespace gradpress::server {

struct HttpRequest {
  std::string method;                          // "GET", "HEAD"
  std::string path;                            // "/api/rows", percent-decoded
  std::map<std::string, std::string> query;    // "since" -> "12", percent-decoded
  std::map<std::string, std::string> headers;  // names lower-cased
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers;  // extra ones, e.g. WWW-Authenticate
};

// Parses a request head (up to the blank line). Returns 0 and fills `out`, or the status to
// answer with: 400 malformed, 405 a method other than GET or HEAD, 414 a target over 2 KiB.
int ParseHttpRequest(const std::string& head, HttpRequest* out);
// "HTTP/1.0 <status> <reason>", headers and body (none for HEAD) as one string.
std::string FormatHttpResponse(const HttpResponse& r, bool head_only);

class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  explicit HttpEndpoint(Handler handler);
  ~HttpEndpoint();
  // Binds host:port (port 0 picks one) and returns the bound port; throws Unavailable.
  int Start(const std::string& host, int port);
  void Stop();

 private:
  void Serve();
  void ServeOne(int fd);
  Handler handler_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gradpress::server
