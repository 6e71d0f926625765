#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/error.h"

namespace gradpress::server {

MetricsHttp::MetricsHttp(std::function<std::string()> text) : text_(std::move(text)) {}

MetricsHttp::~MetricsHttp() { Stop(); }

int MetricsHttp::Start(const std::string& host, int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  GP_ENFORCE_AS(Unavailable, fd_ >= 0, "metrics: socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  GP_ENFORCE(::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1, "metrics: bad address '",
             host, "'");
  GP_ENFORCE_AS(
      Unavailable,
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 16) == 0,
      "metrics: cannot listen on ", host, ":", port, ": ", std::strerror(errno));
  socklen_t len = sizeof(addr);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  thread_ = std::thread([this] { Serve(); });
  return ntohs(addr.sin_port);
}

void MetricsHttp::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) continue;
    timeval tv{1, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    // Read the whole request head: closing with unread bytes makes the kernel send a reset,
    // which can cut the response off at the client.
    std::string req;
    char buf[1024];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      req.append(buf, static_cast<size_t>(n));
    }
    std::string body, status = "404 Not Found";
    if (req.rfind("GET /metrics", 0) == 0) {
      status = "200 OK";
      try {
        body = text_();
      } catch (const std::exception& e) {
        status = "500 Internal Server Error";
        body = e.what();
      }
    }
    const std::string resp = "HTTP/1.0 " + status +
                             "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body;
    ::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
    ::shutdown(c, SHUT_WR);  // then drain what the client still sends, so close sends no reset
    while (::recv(c, buf, sizeof(buf), 0) > 0) {
    }
    ::close(c);
  }
}

void MetricsHttp::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace gradpress::server
