#include "server/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace gradpress::server {
namespace {

constexpr size_t kMaxHead = 16384, kMaxTarget = 2048;
constexpr double kHeadSeconds = 2;
// An answer has kSendSeconds in all to go out (a client may take it a byte at a time, each
// within the socket's 1 s send timeout); the drain after it, kDrainSeconds.
constexpr double kSendSeconds = 5, kDrainSeconds = 1;
using Clock = std::chrono::steady_clock;

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

// Percent-decoding ('+' is a space in a query); false on a bad escape.
bool Decode(const std::string& in, bool query, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size() || !std::isxdigit(static_cast<unsigned char>(in[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(in[i + 2])))
        return false;
      *out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      *out += query && in[i] == '+' ? ' ' : in[i];
    }
  }
  return true;
}

HttpResponse Plain(int status, const std::string& body) {
  HttpResponse r;
  r.status = status;
  r.body = body + "\n";
  return r;
}

}  // namespace

int ParseHttpRequest(const std::string& head, HttpRequest* out) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t a = line.find(' '), b = line.rfind(' ');
  if (a == std::string::npos || b == a || line.compare(b + 1, 5, "HTTP/") != 0) return 400;
  out->method = line.substr(0, a);
  const std::string target = line.substr(a + 1, b - a - 1);
  if (target.size() > kMaxTarget) return 414;
  if (target.empty() || target[0] != '/') return 400;
  const size_t q = target.find('?');
  if (!Decode(target.substr(0, q), false, &out->path)) return 400;
  if (q != std::string::npos) {
    const std::string qs = target.substr(q + 1);
    for (size_t i = 0; i <= qs.size();) {
      size_t amp = qs.find('&', i);
      if (amp == std::string::npos) amp = qs.size();
      const std::string pair = qs.substr(i, amp - i);
      if (!pair.empty()) {
        const size_t eq = pair.find('=');
        std::string k, v;
        if (!Decode(pair.substr(0, eq), true, &k) ||
            !Decode(eq == std::string::npos ? "" : pair.substr(eq + 1), true, &v))
          return 400;
        out->query[k] = v;
      }
      i = amp + 1;
    }
  }
  for (size_t pos = eol; pos != std::string::npos && pos + 2 < head.size();) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string h =
        head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    pos = next;
    if (h.empty()) break;
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0) return 400;
    std::string name = h.substr(0, colon), value = h.substr(colon + 1);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t first = value.find_first_not_of(" \t");
    value = first == std::string::npos ? "" : value.substr(first);
    out->headers[name] = value;
  }
  if (out->method != "GET" && out->method != "HEAD") return 405;
  return 0;
}

std::string FormatHttpResponse(const HttpResponse& r, bool head_only) {
  std::string s = "HTTP/1.0 " + std::to_string(r.status) + " " + Reason(r.status) +
                  "\r\nContent-Type: " + r.content_type +
                  (r.stream ? "" : "\r\nContent-Length: " + std::to_string(r.body.size())) +
                  "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n";
  for (const auto& [k, v] : r.headers) s += k + ": " + v + "\r\n";
  s += "\r\n";
  if (!head_only) s += r.body;
  return s;
}

HttpEndpoint::HttpEndpoint(Handler handler) : handler_(std::move(handler)) {}

HttpEndpoint::~HttpEndpoint() { Stop(); }

int HttpEndpoint::Start(const std::string& host, int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  GP_ENFORCE_AS(Unavailable, fd_ >= 0, "http: socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  GP_ENFORCE(::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1,
             "server.metrics_host: bad IPv4 address '", host, "'");
  GP_ENFORCE_AS(
      Unavailable,
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 16) == 0,
      "http: cannot listen on ", host, ":", port, ": ", std::strerror(errno));
  socklen_t len = sizeof(addr);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  thread_ = std::thread([this] { Serve(); });
  return ntohs(addr.sin_port);
}

void HttpEndpoint::Serve() {
  std::vector<pollfd> fds;
  while (!stop_) {
    // The listening socket; each stream's for its client closing (or sending), and for room
    // to send while it owes part of a chunk. Waits until the next chunk is due, 200 ms at most.
    const auto now = Clock::now();
    int wait_ms = 200;
    fds.assign(1, pollfd{fd_, POLLIN, 0});
    for (const Stream& s : streams_) {
      fds.push_back({s.fd, static_cast<short>(POLLIN | (s.pending.empty() ? 0 : POLLOUT)), 0});
      if (s.pending.empty()) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(s.due - now).count() + 1;
        wait_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, wait_ms));
      }
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    const auto then = Clock::now();
    size_t kept = 0;
    for (size_t i = 0; i < streams_.size(); ++i) {
      Stream& s = streams_[i];
      bool open = !(fds[i + 1].revents & (POLLERR | POLLHUP | POLLNVAL));
      if (open && (fds[i + 1].revents & POLLIN)) {  // a client sends nothing more: 0 is its close
        char buf[4096];
        const ssize_t n = ::recv(s.fd, buf, sizeof(buf), MSG_DONTWAIT);
        open = n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
      }
      if (open && Pump(&s, then)) {
        if (kept != i) streams_[kept] = std::move(s);
        ++kept;
      } else {
        ::close(s.fd);
      }
    }
    streams_.resize(kept);
    open_streams_ = streams_.size();
    if (!(fds[0].revents & POLLIN)) continue;
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) continue;
    if (!ServeOne(c)) ::close(c);
  }
  for (const Stream& s : streams_) ::close(s.fd);
  streams_.clear();
  open_streams_ = 0;
}

bool HttpEndpoint::Pump(Stream* s, Clock::time_point now) {
  if (s->pending.empty()) {
    if (s->last) return false;
    if (now < s->due) return true;
    int after = -1;
    try {
      after = s->next(&s->pending);
    } catch (const std::exception&) {
      return false;  // the answer cannot go on; its client sees the body end
    }
    s->last = after < 0;
    s->due = now + std::chrono::milliseconds(std::max(after, 0));
    s->progress = now;
    if (s->pending.empty()) return !s->last;
  }
  const ssize_t n =
      ::send(s->fd, s->pending.data(), s->pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n > 0) {
    s->pending.erase(0, static_cast<size_t>(n));
    s->progress = now;
    // The next chunk is due `after` from when this one was taken whole.
    if (s->pending.empty()) s->due = std::max(s->due, now);
  } else if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
    return false;
  }
  if (!s->pending.empty() && now - s->progress > std::chrono::duration<double>(kStallSeconds))
    return false;  // a client that takes nothing
  return !(s->pending.empty() && s->last);
}

bool HttpEndpoint::ServeOne(int c) {
  timeval tv{1, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // Read the whole request head: closing with unread bytes makes the kernel send a reset,
  // which can cut the response off at the client.
  // A client has kHeadSeconds in all to send it: one that sends a byte now and then would
  // otherwise hold the endpoint (and the streams it serves) for as long as it likes.
  std::string req;
  char buf[4096];
  bool complete = false;
  const auto deadline = Clock::now() + std::chrono::duration<double>(kHeadSeconds);
  while (req.size() <= kMaxHead && Clock::now() < deadline) {
    const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
    if (req.find("\r\n\r\n") != std::string::npos) {
      complete = true;
      break;
    }
  }
  HttpRequest request;
  HttpResponse resp;
  int status = 0;
  if (!complete) {
    status = req.size() > kMaxHead ? 431 : req.empty() ? 0 : 408;
    if (status == 0) return false;  // connected and sent nothing
  } else if (req.find("\r\n\r\n") > kMaxHead) {
    status = 431;
  } else {
    status = ParseHttpRequest(req.substr(0, req.find("\r\n\r\n") + 2), &request);
  }
  if (status != 0) {
    resp = Plain(status, Reason(status));
  } else {
    try {
      resp = handler_(request);
    } catch (const std::exception& e) {
      resp = Plain(500, e.what());
    }
  }
  const bool head_only = request.method == "HEAD";
  if (resp.stream && !head_only && streams_.size() >= kMaxStreams) {
    resp = Plain(503, "too many open streams (" + std::to_string(kMaxStreams) +
                          "): close a dashboard page or try again later");
  }
  if (head_only) resp.stream = nullptr;
  const std::string out = FormatHttpResponse(resp, head_only);
  const auto send_deadline = Clock::now() + std::chrono::duration<double>(kSendSeconds);
  for (size_t sent = 0; sent < out.size();) {
    if (Clock::now() >= send_deadline) return false;  // a client that reads too slowly
    const ssize_t n = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;  // gone, or not reading for 1 s
    sent += static_cast<size_t>(n);
  }
  if (resp.stream) {  // its chunks from the serving loop, the first at once
    Stream s;
    s.fd = c;
    s.next = std::move(resp.stream);
    s.due = s.progress = Clock::now();
    streams_.push_back(std::move(s));
    open_streams_ = streams_.size();
    return true;
  }
  ::shutdown(c, SHUT_WR);  // then drain what the client still sends, so close sends no reset
  // Bounded in bytes and in time: a client that keeps sending a byte a second must not hold
  // the endpoint.
  const auto drain_deadline = Clock::now() + std::chrono::duration<double>(kDrainSeconds);
  for (size_t drained = 0; drained < (1 << 16) && Clock::now() < drain_deadline;) {
    const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  return false;
}

void HttpEndpoint::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace gradpress::server
