#pragma once
// MetricsHttp: a minimal HTTP/1.0 endpoint serving the store's counters in Prometheus text
// format on GET /metrics (anything else: 404). One thread, one connection at a time, a 1 s
// read timeout per request; meant for a scraper, not for browsers at scale.
//
//   MetricsHttp http([&] { return store.Stats().Prometheus(); });
//   int port = http.Start("0.0.0.0", 9100);  ...;  http.Stop();
//
// Thread-safety: Start/Stop from one thread; the text callback runs on the server thread.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace gradpress::server {

class MetricsHttp {
 public:
  explicit MetricsHttp(std::function<std::string()> text);
  ~MetricsHttp();
  // Binds host:port (port 0 picks one) and returns the bound port; throws Unavailable.
  int Start(const std::string& host, int port);
  void Stop();

 private:
  void Serve();
  std::function<std::string()> text_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gradpress::server
