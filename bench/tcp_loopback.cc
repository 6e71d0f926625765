#include "bench/tcp_loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"

namespace gradpress::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Fail(const char* what) {
  throw std::runtime_error(std::string("tcp loopback: ") + what + ": " + std::strerror(errno));
}

// Closes the descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

}  // namespace

double TcpLoopbackSeconds(uint64_t bytes) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.fd < 0) Fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Fail("bind");
  if (::listen(listener.fd, 1) != 0) Fail("listen");
  if (::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Fail("getsockname");
  }
  // connect() completes through the backlog, so accept() after it never blocks for long.
  Fd sender(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sender.fd < 0) Fail("socket");
  if (::connect(sender.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("connect");
  }
  Fd receiver(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (receiver.fd < 0) Fail("accept");

  Clock::time_point done;
  std::string receive_error;
  std::thread reader([&] {
    std::vector<char> buf(kTcpWriteBytes);
    uint64_t got = 0;
    while (got < bytes) {
      const ssize_t n = ::recv(receiver.fd, buf.data(), buf.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        receive_error = n == 0 ? "connection closed early" : std::strerror(errno);
        ::shutdown(receiver.fd, SHUT_RDWR);  // unblocks the sender
        return;
      }
      got += static_cast<uint64_t>(n);
    }
    done = Clock::now();
  });

  std::vector<char> buf(kTcpWriteBytes, 'g');
  const Clock::time_point start = Clock::now();
  uint64_t sent = 0;
  bool send_failed = false;
  int send_errno = 0;
  while (sent < bytes && !send_failed) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - sent));
    size_t off = 0;
    while (off < want) {  // a send may be partial
      const ssize_t n = ::send(sender.fd, buf.data() + off, want - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        send_failed = true;
        send_errno = errno;
        ::shutdown(sender.fd, SHUT_RDWR);  // unblocks the receiver
        break;
      }
      off += static_cast<size_t>(n);
    }
    sent += off;
  }
  reader.join();
  if (!receive_error.empty()) throw std::runtime_error("tcp loopback: recv: " + receive_error);
  if (send_failed) {
    errno = send_errno;
    Fail("send");
  }
  return std::chrono::duration<double>(done - start).count();
}

double TcpLoopbackGbps(uint64_t bytes, int runs) {
  if (bytes == 0 || runs < 1) throw std::invalid_argument("tcp loopback: bytes and runs >= 1");
  std::vector<double> gbps;
  for (int i = 0; i < runs; ++i) {
    gbps.push_back(static_cast<double>(bytes) / TcpLoopbackSeconds(bytes) / 1e9);
  }
  return Median(gbps);
}

}  // namespace gradpress::bench
