// gradpress-fuzz-http: the server's HTTP/1.0 port (server.metrics_port; server/http_endpoint.h)
// -- the request parser, the dashboard's router (server/dashboard.h: the page, chart.js,
// /api/rows, /api/stream, /api/workers, /metrics, tokens) and the endpoint's own reading of a
// connection -- fed arbitrary bytes.
//
// Input: [options] then the bytes a client sends. options bit 0: the router's dashboard has a
// token ("s3cret"); bit 1: the bytes also go to a real HttpEndpoint on 127.0.0.1 (one per
// process, no token), written at once and the connection half-closed, as a client that sends
// and then waits.
// Oracles besides the sanitizers:
// - ParseHttpRequest answers 0, 400, 405 or 414; 0 means GET or HEAD and a path from '/'.
// - the router answers 200, 400, 401 or 404, never throws; the formatted answer starts with
//   "HTTP/1.0 <status> " and its Content-Length is its body's size; a streamed answer gives at
//   most a few chunks without throwing.
// - the endpoint answers with "HTTP/1.0 <status> " (the parser's status where it refused the
//   head) or closes without a word for nothing sent, and closes the connection within 5 s
//   (its head, answer and drain bounds), so a hostile request cannot hold the port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz/fuzz_util.h"
#include "server/dashboard.h"
#include "server/http_endpoint.h"
#include "server/parameter_store.h"

namespace gradpress::fuzz {
namespace {

using server::Dashboard;
using server::HttpRequest;
using server::HttpResponse;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "gradpress-fuzz-http: %s\n", what.c_str());
  std::abort();
}

struct World {
  server::ParameterStore store{server::StoreOptions{}};
  Dashboard open{{"job", "", 0, 1}, &store};
  Dashboard guarded{{"job", "s3cret", 0, 1}, &store};
  std::unique_ptr<server::HttpEndpoint> http;
  int port = 0;
  World() {
    google::protobuf::RepeatedPtrField<proto::WorkerRow> rows;
    for (int i = 0; i < 3; ++i) {
      proto::WorkerRow* r = rows.Add();
      r->set_kind(i == 2 ? proto::WorkerRow::EPOCH : proto::WorkerRow::STEP);
      r->set_rank(i % 2);
      r->set_step(i);
      r->set_loss(2.3 - i);
      r->set_test_acc(0.5);
    }
    open.Add(rows);
    guarded.Add(rows);
    http = std::make_unique<server::HttpEndpoint>(
        [this](const HttpRequest& r) { return open.Handle(r); });
    port = http->Start("127.0.0.1", 0);
  }
};

World& TheWorld() {
  static World* w = new World();  // lives until exit: its thread serves every input
  return *w;
}

// The head as HttpEndpoint hands it to the parser: up to and including the blank line's first
// CRLF; npos when the bytes hold no blank line.
size_t HeadEnd(const std::string& bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  return end == std::string::npos ? end : end + 2;
}

// The parser's status (0: accepted, and the router answered), or -1 for no blank line.
int Route(const Dashboard& d, const std::string& bytes) {
  const size_t end = HeadEnd(bytes);
  if (end == std::string::npos) return -1;
  HttpRequest req;
  const int parsed = server::ParseHttpRequest(bytes.substr(0, end), &req);
  if (parsed != 0 && parsed != 400 && parsed != 405 && parsed != 414)
    Fail("parser answered " + std::to_string(parsed));
  if (parsed != 0) return parsed;
  if ((req.method != "GET" && req.method != "HEAD") || req.path.empty() || req.path[0] != '/')
    Fail("parser accepted method '" + req.method + "' path '" + req.path + "'");
  HttpResponse resp;
  try {
    resp = d.Handle(req);
  } catch (const std::exception& e) {
    Fail(std::string("router threw: ") + e.what());
  }
  const int s = resp.status;
  if (s != 200 && s != 400 && s != 401 && s != 404) Fail("router answered " + std::to_string(s));
  const std::string out = server::FormatHttpResponse(resp, false);
  const std::string start = "HTTP/1.0 " + std::to_string(s) + " ";
  if (out.compare(0, start.size(), start) != 0) Fail("formatted answer starts badly");
  if (!resp.stream) {
    const std::string length = "Content-Length: " + std::to_string(resp.body.size()) + "\r\n";
    if (out.find(length) == std::string::npos) Fail("Content-Length is not the body's size");
  } else {
    std::string chunk;
    for (int i = 0; i < 3; ++i) {
      chunk.clear();
      int after = -1;
      try {
        after = resp.stream(&chunk);
      } catch (const std::exception& e) {
        Fail(std::string("stream threw: ") + e.what());
      }
      if (after < 0) break;
    }
  }
  return 0;
}

// A socket connected to 127.0.0.1:port. Thousands of connections a second run the client
// side out of ephemeral ports (TIME_WAIT) now and then: retried for 5 s, then a failure of
// the harness, not of the endpoint.
int Connect(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) Fail(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    const int err = errno;
    ::close(fd);
    if (std::chrono::steady_clock::now() > until)
      Fail(std::string("harness: connect: ") + std::strerror(err));
    ::poll(nullptr, 0, 10);
  }
}

// The endpoint's answer to `bytes` sent at once and half-closed; aborts if it keeps the
// connection open past 5 s. The client's socket is closed with a reset (SO_LINGER 0), so it
// leaves no TIME_WAIT behind.
std::string Ask(int port, const std::string& bytes) {
  const int fd = Connect(port);
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the endpoint answered and closed before taking everything
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string got;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) Fail("the endpoint kept a connection open for 5 s");
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;  // closed (a reset included)
    got.append(buf, static_cast<size_t>(n));
  }
  const linger abort_close{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close));
  ::close(fd);
  return got;
}

void ThroughEndpoint(int port, const std::string& bytes, int routed) {
  const std::string got = Ask(port, bytes);
  if (got.empty()) {
    if (!bytes.empty()) Fail("no answer to a request");
    return;  // nothing sent: closed without a word
  }
  if (got.compare(0, 9, "HTTP/1.0 ") != 0 || got.size() < 13) Fail("answer without a status line");
  const int status = std::atoi(got.substr(9, 3).c_str());
  if (routed > 0 && status != routed)
    Fail("endpoint answered " + std::to_string(status) + ", parser " + std::to_string(routed));
  if (routed == -1 && status != 408 && status != 431)
    Fail("an incomplete head answered " + std::to_string(status));
}

// --- seeds: valid and near-valid requests --------------------------------------------------

void WriteSeeds(Seeds& seeds) {
  const char* targets[] = {"/",
                           "/chart.js",
                           "/metrics",
                           "/api/rows?since=0",
                           "/api/rows?since=1&workers=1",
                           "/api/workers",
                           "/api/stream?since=0&every=0.2&workers=1",
                           "/api/rows?token=s3cret&since=%32",
                           "/nothing",
                           "/api/rows?since=-5&limit=+3"};
  int i = 0;
  for (const char* t : targets) {
    for (char options : {0, 1, 2, 3}) {
      std::string req = std::string(1, options) + "GET " + t + " HTTP/1.0\r\nHost: x\r\n";
      if (options & 1) req += "Authorization: Bearer s3cret\r\n";
      seeds.Write("http-" + std::to_string(i++), req + "\r\n");
    }
  }
  seeds.Write("http-head", std::string("\x02") + "HEAD / HTTP/1.1\r\n\r\n");
  seeds.Write("http-post",
              std::string("\x02") + "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
  seeds.Write("http-partial", std::string("\x02") + "GET /api/rows HTTP/1.0\r\nX: y");
}

}  // namespace
}  // namespace gradpress::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace gradpress::fuzz;
  Initialize(argc, argv, WriteSeeds);
  TheWorld();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradpress::fuzz;
  FuzzInput in(data, size);
  const uint8_t options = in.Byte();
  const std::string bytes(in.Rest());
  World& w = TheWorld();
  const int routed = Route(options & 1 ? w.guarded : w.open, bytes);
  if (options & 2) ThroughEndpoint(w.port, bytes, routed);
  return 0;
}
