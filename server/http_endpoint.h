#pragma once
// HttpEndpoint: the server's small HTTP/1.0 port (server.metrics_port): Prometheus text on
// /metrics and the dashboard (server/dashboard.h). One thread serves one connection at a time
// with 1 s read and write timeouts, 2 s in all for a request's head, 5 s for the answer to go
// out and 1 s to drain what the client sends after its head (at most 64 KiB), so a slow,
// stalled or chatty client costs the page at most about 8 s and never the gRPC server; it
// answers malformed requests itself (400, 405, 408, 414, 431) and closes the connection.
// fuzz/http_fuzz.cc fuzzes the parser, the router and the endpoint.
// A streamed answer (HttpResponse::stream: the dashboard's api/stream) stays open on the same
// thread, which sends its chunks between other requests without blocking on them: at most
// kMaxStreams at once (then 503); a client that takes nothing for kStallSeconds, or closes,
// is let go.
//
//   HttpEndpoint http([&](const HttpRequest& r) { return dashboard.Handle(r); });
//   int port = http.Start("127.0.0.1", 9100);  ...;  http.Stop();
//
// Thread-safety: Start/Stop from one thread; the handler runs on the endpoint's thread.
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

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
  // Set: a streamed answer. The head goes without Content-Length (the body runs until the
  // connection closes), then `body`, then chunks: stream(&chunk) fills the next one and
  // returns the milliseconds until it is asked again (0: at once; negative: this chunk is the
  // last), and never before the client took the chunk. It runs on the endpoint's thread.
  std::function<int(std::string* chunk)> stream;
};

// Parses a request head (up to the blank line). Returns 0 and fills `out`, or the status to
// answer with: 400 malformed, 405 a method other than GET or HEAD, 414 a target over 2 KiB.
int ParseHttpRequest(const std::string& head, HttpRequest* out);
// "HTTP/1.0 <status> <reason>", headers and body (none for HEAD) as one string; a streamed
// answer's head has no Content-Length.
std::string FormatHttpResponse(const HttpResponse& r, bool head_only);

class HttpEndpoint {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  explicit HttpEndpoint(Handler handler);
  ~HttpEndpoint();
  // Binds host:port (port 0 picks one) and returns the bound port; throws Unavailable.
  int Start(const std::string& host, int port);
  void Stop();
  size_t open_streams() const { return open_streams_.load(); }

  static constexpr size_t kMaxStreams = 8;
  static constexpr double kStallSeconds = 10;

 private:
  struct Stream {
    int fd = -1;
    std::function<int(std::string*)> next;
    std::string pending;  // of the current chunk, not yet taken by the client
    std::chrono::steady_clock::time_point due, progress;
    bool last = false;  // the current chunk ends the answer
  };
  void Serve();
  // Answers one connection; true when it became a stream (kept open), else it is done.
  bool ServeOne(int fd);
  // Sends what streams owe; false: the stream is over (closed by its client, stalled, ended).
  bool Pump(Stream* s, std::chrono::steady_clock::time_point now);
  Handler handler_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<Stream> streams_;  // the endpoint thread's only
  std::atomic<size_t> open_streams_{0};
};

}  // namespace gradpress::server
