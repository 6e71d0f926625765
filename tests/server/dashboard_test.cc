// The dashboard's server side (server/dashboard.h, server/http_endpoint.h): request parsing and
// its 4xx answers, the token, the rows the workers' pushes carry as JSON, and an endpoint that
// a silent or oversized client cannot stall. The page itself is tested in a browser
// (tests/deploy/dashboard_*).
#include "server/dashboard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "server/parameter_store.h"
#include "tests/catch_torch.h"
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

using server::Dashboard;
using server::HttpRequest;

HttpRequest Get(const std::string& target, const std::string& auth = "") {
  std::string head = "GET " + target + " HTTP/1.1\r\nHost: x\r\n";
  if (!auth.empty()) head += "Authorization: " + auth + "\r\n";
  HttpRequest r;
  REQUIRE(server::ParseHttpRequest(head + "\r\n", &r) == 0);
  return r;
}

proto::WorkerRow StepRow(int rank, int64_t step, double loss) {
  proto::WorkerRow r;
  r.set_kind(proto::WorkerRow::STEP);
  r.set_rank(rank);
  r.set_step(step);
  r.set_loss(loss);
  r.set_bytes_up(100);
  r.set_step_ms(12.5);
  return r;
}

google::protobuf::RepeatedPtrField<proto::WorkerRow> Rows(std::vector<proto::WorkerRow> v) {
  google::protobuf::RepeatedPtrField<proto::WorkerRow> out;
  for (auto& r : v) *out.Add() = r;
  return out;
}

// A client socket connected to 127.0.0.1:port that has sent `request` (-1 if it could not).
int Open(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` to 127.0.0.1:port and returns the whole answer ("" if none in 10 s).
std::string Ask(int port, const std::string& request) {
  const int fd = Open(port, request);
  if (fd < 0) return "";
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// Reads from fd into *got until it holds `lines` newline-ended lines after the head (the blank
// line), or `timeout` passes; false then (or when the server closed first).
bool ReadLines(int fd, std::string* got, size_t lines, double timeout = 20) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  for (;;) {
    const size_t body = got->find("\r\n\r\n");
    if (body != std::string::npos &&
        static_cast<size_t>(
            std::count(got->begin() + static_cast<long>(body) + 4, got->end(), '\n')) >= lines)
      return true;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    got->append(buf, static_cast<size_t>(n));
  }
}

// The body lines of a streamed answer.
std::vector<std::string> BodyLines(const std::string& got) {
  std::vector<std::string> out;
  size_t at = got.find("\r\n\r\n") + 4;
  for (size_t nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(got.substr(at, nl - at));
  return out;
}

TEST_CASE("http: requests parse; malformed ones get 400, 405, 414", "[dashboard]") {
  HttpRequest r;
  CHECK(server::ParseHttpRequest(
            "GET /api/rows?since=12&x=a%20b+c HTTP/1.1\r\nAuthorization:  Bearer t\r\n\r\n", &r) ==
        0);
  CHECK(r.path == "/api/rows");
  CHECK(r.query.at("since") == "12");
  CHECK(r.query.at("x") == "a b c");
  CHECK(r.headers.at("authorization") == "Bearer t");
  HttpRequest bad;
  CHECK(server::ParseHttpRequest("garbage\r\n\r\n", &bad) == 400);
  CHECK(server::ParseHttpRequest("GET nopath HTTP/1.1\r\n\r\n", &bad) == 400);
  CHECK(server::ParseHttpRequest("GET /a%zz HTTP/1.1\r\n\r\n", &bad) == 400);
  CHECK(server::ParseHttpRequest("GET / HTTP/1.1\r\nno colon\r\n\r\n", &bad) == 400);
  CHECK(server::ParseHttpRequest("POST / HTTP/1.1\r\n\r\n", &bad) == 405);
  CHECK(server::ParseHttpRequest("GET /" + std::string(3000, 'a') + " HTTP/1.1\r\n\r\n", &bad) ==
        414);
}

TEST_CASE("dashboard: rows as metrics.jsonl JSON, paged by since; the oldest dropped past max_rows",
          "[dashboard]") {
  server::ParameterStore store(server::StoreOptions{});
  Dashboard d({"job", "", 0, 1, /*max_rows=*/3}, &store);
  proto::WorkerRow codec;
  codec.set_kind(proto::WorkerRow::CODEC);
  codec.set_step(7);
  codec.set_push_codec("topk\n\"x\"\x01");
  d.Add(Rows({StepRow(0, 0, 2.5), StepRow(1, 0, 2.25), codec}));
  const std::string all = d.RowsJson(0, 10);
  CHECK(all.find("\"next\": 3, \"dropped\": 0") != std::string::npos);
  CHECK(all.find("{\"rank\": 0, \"step\": 0, \"loss\": 2.5, \"bytes_up\": 100") !=
        std::string::npos);
  CHECK(all.find("\"step_ms\": 12.5") != std::string::npos);
  CHECK(all.find("\"push_codec\": \"topk?\\\"x\\\"?\"") != std::string::npos);  // printable only
  CHECK(d.RowsJson(1, 1).find("\"next\": 2, \"dropped\": 0, \"end\": 3") != std::string::npos);
  d.Add(Rows({StepRow(0, 1, 2.0), StepRow(0, -1, 9.0)}));  // a negative step is skipped
  const std::string later = d.RowsJson(0, 10);
  CHECK(later.find("\"next\": 4, \"dropped\": 1, \"end\": 4") != std::string::npos);
  CHECK(later.find("\"loss\": 2.5") == std::string::npos);  // the first row is gone
  CHECK(later.find("\"loss\": 9") == std::string::npos);
  CHECK(d.RowsJson(4, 10).find("\"rows\": []") != std::string::npos);
  CHECK(d.RowsJson(99, 10).find("\"next\": 4") != std::string::npos);  // past the end: nothing
  // max_rows 0 (a server without an HTTP port): nothing kept.
  Dashboard none({"job", "", 0, 1, /*max_rows=*/0}, &store);
  none.Add(Rows({StepRow(0, 0, 2.5), StepRow(1, 0, 2.25)}));
  CHECK(none.RowsJson(0, 10).find("\"next\": 0, \"dropped\": 0, \"end\": 0") != std::string::npos);
}

TEST_CASE("dashboard: a step's row costs a push about a hundred bytes", "[dashboard]") {
  proto::WorkerRow r = StepRow(1, 123456, 0.4321);
  r.set_bytes_down(246824);
  r.set_compute_ms(8.38);
  r.set_encode_ms(0.33);
  r.set_network_ms(0.98);
  r.set_wait_ms(0.59);
  r.set_decode_ms(0.03);
  r.set_server_ms(0.71);
  r.set_exposed_comm_ms(2.9);
  proto::PushHeader h;
  *h.add_rows() = r;
  const size_t with = h.ByteSizeLong();
  h.clear_rows();
  const size_t added = with - h.ByteSizeLong();
  WARN("one step row adds " << added << " bytes to a push's header");
  CHECK(added < 128);
}

TEST_CASE("dashboard: with a token, the page and api need it; /metrics and chart.js do not",
          "[dashboard]") {
  server::ParameterStore store(server::StoreOptions{});
  Dashboard d({"job", "s3cret", 0, 1}, &store);
  CHECK(d.Handle(Get("/")).status == 401);
  CHECK(d.Handle(Get("/")).headers.count("WWW-Authenticate") == 1);
  CHECK(d.Handle(Get("/api/rows", "Bearer wrong")).status == 401);
  CHECK(d.Handle(Get("/api/workers?token=s3cre")).status == 401);
  CHECK(d.Handle(Get("/api/rows", "Bearer s3cret")).status == 200);
  CHECK(d.Handle(Get("/?token=s3cret")).status == 200);
  CHECK(d.Handle(Get("/?token=s3cret")).body.find("<script src=\"chart.js\"></script>") !=
        std::string::npos);
  CHECK(d.Handle(Get("/metrics")).status == 200);
  CHECK(d.Handle(Get("/chart.js")).body.size() > 100000);
  CHECK(d.Handle(Get("/api/rows?since=-1&token=s3cret")).status == 400);
  CHECK(d.Handle(Get("/api/rows?limit=999999&token=s3cret")).status == 400);
  CHECK(d.Handle(Get("/api/other?token=s3cret")).status == 404);
  CHECK(d.Handle(Get("/etc/passwd")).status == 404);
  const std::string workers = d.Handle(Get("/api/workers?token=s3cret")).body;
  CHECK(workers.find("\"job\": \"job\", \"shard\": 0, \"shards\": 1") != std::string::npos);
  CHECK(workers.find("\"workers\": []") != std::string::npos);
  // The page's one request a refresh: the rows and, as "workers", api/workers' answer.
  const std::string both = d.Handle(Get("/api/rows?since=0&workers=1&token=s3cret")).body;
  CHECK(both.find("\"rows\": [], \"workers\": {\"job\": \"job\", \"shard\": 0") !=
        std::string::npos);
  CHECK(both.substr(both.size() - 4) == "]}}\n");  // the rows, then the workers object
  CHECK(d.Handle(Get("/api/rows?workers=0&token=s3cret")).body.find("\"workers\"") ==
        std::string::npos);
  CHECK(d.Handle(Get("/api/rows?workers=yes&token=s3cret")).status == 400);
}

TEST_CASE("http: a silent, dripping or oversized client does not stall the endpoint",
          "[dashboard]") {
  server::ParameterStore store(server::StoreOptions{});
  Dashboard d({"job", "", 0, 1}, &store);
  server::HttpEndpoint http([&](const HttpRequest& r) { return d.Handle(r); });
  const int port = http.Start("127.0.0.1", 0);
  // A client connects and says nothing; another asks meanwhile and is answered.
  auto silent = std::async(std::launch::async, [&] { return Ask(port, ""); });
  const std::string answer = Ask(port, "GET /api/rows HTTP/1.0\r\n\r\n");
  CHECK(answer.rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(answer.find("Content-Type: application/json") != std::string::npos);
  silent.get();
  // A client that sends its head a byte at a time, for as long as it likes, gets 408 after 2 s
  // in all, and the next client is answered.
  Event dripping;
  auto drip = std::async(std::launch::async, [&] {
    const int fd = Open(port, "GET / HTTP/1.0\r\nX: ");
    dripping.Set();
    std::string got;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (fd >= 0 && std::chrono::steady_clock::now() < until &&
           ::send(fd, "a", 1, MSG_NOSIGNAL) == 1) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 300) > 0) break;  // answered
    }
    if (fd >= 0) ReadLines(fd, &got, 0, 10);
    if (fd >= 0) ::close(fd);
    return got;
  });
  REQUIRE(dripping.Wait());
  const auto asked = std::chrono::steady_clock::now();
  CHECK(Ask(port, "GET /api/workers HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(std::chrono::steady_clock::now() - asked < std::chrono::seconds(10));
  CHECK(drip.get().rfind("HTTP/1.0 408", 0) == 0);
  CHECK(Ask(port, "GET / HTTP/1.0\r\nX: " + std::string(20000, 'a') + "\r\n\r\n")
            .rfind("HTTP/1.0 431", 0) == 0);
  CHECK(Ask(port, "DELETE / HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 405", 0) == 0);
  CHECK(Ask(port, "HEAD / HTTP/1.0\r\n\r\n").find("<html") == std::string::npos);  // no body
  http.Stop();
}

TEST_CASE("http: a client that keeps sending after its head, or reads its answer slowly, is let go",
          "[dashboard]") {
  server::ParameterStore store(server::StoreOptions{});
  Dashboard d({"job", "", 0, 1}, &store);
  std::vector<proto::WorkerRow> rows;
  for (int i = 0; i < 20000; ++i) {
    rows.push_back(StepRow(i % 8, i, 1.0));
    rows.back().set_push_codec(std::string(190, 'c'));
  }
  d.Add(Rows(rows));
  server::HttpEndpoint http([&](const HttpRequest& r) { return d.Handle(r); });
  const int port = http.Start("127.0.0.1", 0);

  // Chatty: a byte every 100 ms after its head, for up to 30 s. It gets its answer, and the
  // connection is closed within the drain's bound (1 s), not after 64 KiB of bytes.
  {
    const int fd = Open(port, "GET /api/workers HTTP/1.0\r\n\r\n");
    REQUIRE(fd >= 0);
    const auto start = std::chrono::steady_clock::now();
    std::string got;
    bool closed = false;
    char buf[4096];
    while (!closed && std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
      if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;  // reset: the endpoint closed
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      closed = n <= 0;
    }
    const auto held = std::chrono::steady_clock::now() - start;
    ::close(fd);
    CHECK(got.rfind("HTTP/1.0 200 OK", 0) == 0);
    CHECK(held < std::chrono::seconds(10));
  }

  // Slow reader: takes an answer of some MB (20000 rows) 1 KiB every 100 ms, through a small
  // receive window. The endpoint gives up on it after 5 s, so another client is answered
  // meanwhile.
  Event reading, done;
  auto slow = std::async(std::launch::async, [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    const std::string req = "GET /api/rows?limit=20000 HTTP/1.0\r\n\r\n";
    size_t total = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[1024];
      while (!done.IsSet()) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        total += static_cast<size_t>(n);
        reading.Set();
        done.Wait(std::chrono::milliseconds(100));
      }
    }
    ::close(fd);
    return total;
  });
  REQUIRE(reading.Wait());
  const auto asked = std::chrono::steady_clock::now();
  const std::string answer = Ask(port, "GET /api/workers HTTP/1.0\r\n\r\n");
  const auto waited = std::chrono::steady_clock::now() - asked;
  done.Set();
  const size_t taken = slow.get();
  CHECK(answer.rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(waited < std::chrono::seconds(10));
  CHECK(taken < 20000u * 200);  // it was cut off, not served whole
  http.Stop();
}

TEST_CASE("http: api/stream sends an answer a period on one open connection, between requests",
          "[dashboard]") {
  server::ParameterStore store(server::StoreOptions{});
  Dashboard d({"job", "", 0, 1}, &store);
  d.Add(Rows({StepRow(0, 0, 2.5), StepRow(1, 0, 2.25)}));
  server::HttpEndpoint http([&](const HttpRequest& r) { return d.Handle(r); });
  const int port = http.Start("127.0.0.1", 0);

  const int fd = Open(port, "GET /api/stream?since=0&every=0.2&workers=1 HTTP/1.0\r\n\r\n");
  REQUIRE(fd >= 0);
  std::string got;
  REQUIRE(ReadLines(fd, &got, 1));
  CHECK(got.rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(got.find("Content-Type: application/x-ndjson") != std::string::npos);
  CHECK(got.find("Content-Length") == std::string::npos);  // the body runs until the close
  const std::string first = BodyLines(got)[0];
  CHECK(first.rfind("{\"next\": 2, \"dropped\": 0, \"end\": 2, \"rows\": [{", 0) == 0);
  CHECK(first.find("},{\"rank\": 1") != std::string::npos);  // rows joined on one line
  CHECK(first.find("\"workers\": {\"job\": \"job\"") != std::string::npos);
  CHECK(http.open_streams() == 1);

  // Other requests are answered while it is open, and rows added later come on it.
  CHECK(Ask(port, "GET /api/rows HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 200 OK", 0) == 0);
  d.Add(Rows({StepRow(0, 1, 2.0)}));
  std::string with_new;
  REQUIRE(WaitFor([&] {
    if (!ReadLines(fd, &got, BodyLines(got).size() + 1)) return false;
    with_new = BodyLines(got).back();
    return with_new.find("\"next\": 3,") != std::string::npos;
  }));
  CHECK(with_new.find("\"rows\": [{\"rank\": 0, \"step\": 1, \"loss\": 2,") != std::string::npos);
  // Its client closes: the endpoint lets it go.
  ::close(fd);
  CHECK(WaitFor([&] { return http.open_streams() == 0; }));

  // A page opened late: more rows than an answer holds come back to back, not a period apart.
  for (int push = 0; push < 100; ++push) {
    std::vector<proto::WorkerRow> rows;
    for (int i = 0; i < 60; ++i) rows.push_back(StepRow(0, 2 + push * 60 + i, 1.0));
    d.Add(Rows(rows));
  }
  const int late = Open(port, "GET /api/stream?since=0&every=3600 HTTP/1.0\r\n\r\n");
  REQUIRE(late >= 0);
  std::string caught;
  REQUIRE(ReadLines(late, &caught, 2));
  const auto lines = BodyLines(caught);
  CHECK(lines[0].rfind("{\"next\": 5000, \"dropped\": 0, \"end\": 6003,", 0) == 0);
  CHECK(lines[1].rfind("{\"next\": 6003, \"dropped\": 0, \"end\": 6003,", 0) == 0);
  CHECK(lines[1].find("\"workers\"") == std::string::npos);
  ::close(late);

  // At most kMaxStreams at once; then 503, and the open ones go on.
  std::vector<int> open;
  for (size_t i = 0; i < server::HttpEndpoint::kMaxStreams; ++i) {
    open.push_back(Open(port, "GET /api/stream?since=6003 HTTP/1.0\r\n\r\n"));
    std::string head;
    REQUIRE(ReadLines(open.back(), &head, 1));
  }
  CHECK(WaitFor([&] { return http.open_streams() == server::HttpEndpoint::kMaxStreams; }));
  CHECK(Ask(port, "GET /api/stream HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 503", 0) == 0);
  CHECK(Ask(port, "HEAD /api/stream HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 200", 0) == 0);
  for (int f : open) ::close(f);
  http.Stop();
  CHECK(http.open_streams() == 0);

  CHECK(d.Handle(Get("/api/stream?every=0.1")).status == 400);
  CHECK(d.Handle(Get("/api/stream?every=1s")).status == 400);
  CHECK(d.Handle(Get("/api/stream?since=x")).status == 400);
  CHECK(d.Handle(Get("/api/stream?workers=2")).status == 400);
  CHECK(d.Handle(Get("/api/stream?every=2.5")).stream != nullptr);
  CHECK(d.Handle(Get("/api/rows")).stream == nullptr);
}

}  // namespace
}  // namespace gradpress::testing
