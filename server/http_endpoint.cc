#include "server/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "common/error.h"

namespace gradpress::server {
namespace {

constexpr size_t kMaxHead = 16384, kMaxTarget = 2048;

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
                  "\r\nContent-Length: " + std::to_string(r.body.size()) +
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
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) continue;
    ServeOne(c);
    ::close(c);
  }
}

void HttpEndpoint::ServeOne(int c) {
  timeval tv{1, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // Read the whole request head: closing with unread bytes makes the kernel send a reset,
  // which can cut the response off at the client.
  std::string req;
  char buf[4096];
  bool complete = false;
  while (req.size() <= kMaxHead) {
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
    if (status == 0) return;  // connected and sent nothing
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
  const std::string out = FormatHttpResponse(resp, request.method == "HEAD");
  for (size_t sent = 0; sent < out.size();) {
    const ssize_t n = ::send(c, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // gone, or not reading for 1 s
    sent += static_cast<size_t>(n);
  }
  ::shutdown(c, SHUT_WR);  // then drain what the client still sends, so close sends no reset
  for (size_t drained = 0; drained < (1 << 16);) {
    const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

void HttpEndpoint::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace gradpress::server
