#include "server/dashboard.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>

#include "common/json_line.h"
#include "server/dashboard_assets.h"
#include "server/parameter_store.h"

namespace gradpress::server {
namespace {

constexpr int kMaxRowsPerPush = 64;
constexpr int64_t kDefaultLimit = 5000, kMaxLimit = 20000;

HttpResponse Answer(const char* content_type, std::string body) {
  HttpResponse r;
  r.content_type = content_type;
  r.body = std::move(body);
  return r;
}

HttpResponse Json(std::string body) { return Answer("application/json", std::move(body)); }

HttpResponse Error(int status, const std::string& why) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = JsonLine().Int("status", status).Str("error", why).Done() + "\n";
  if (status == 401) r.headers["WWW-Authenticate"] = "Bearer realm=\"gradpress\"";
  return r;
}

// Printable ASCII only, at most 200 bytes: a codec name from a worker stays a short label.
std::string Label(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 200)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// Constant time in the token's length, whatever matches.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

// A whole non-negative integer in `s` (at most 18 digits), else -1.
int64_t Count(const std::string& s) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), ::isdigit)) return -1;
  return std::strtoll(s.c_str(), nullptr, 10);
}

// The query api/rows and api/stream share: since (default 0) and workers (0 or 1, default 0).
// Returns what was wrong, or "".
std::string RowsQuery(const HttpRequest& r, int64_t* since, bool* with_workers) {
  const auto s = r.query.find("since"), w = r.query.find("workers");
  *since = s == r.query.end() ? 0 : Count(s->second);
  if (*since < 0) return "since must be a row number (0, 1, ...)";
  *with_workers = w != r.query.end() && w->second == "1";
  if (w != r.query.end() && !*with_workers && w->second != "0") return "workers must be 0 or 1";
  return "";
}

// Whether a WorkerRow field is one of a step's metrics: all but the row's identity and the
// fields of the other kinds of row (EPOCH, CODEC, REJOIN).
bool StepMetricField(const std::string& name) {
  static const std::set<std::string> others = {
      "kind", "rank", "step", "epoch", "train_acc", "test_acc", "push_codec", "rung", "steps_lost"};
  return others.count(name) == 0;
}

std::string Replace(std::string s, const std::string& marker, const std::string& with) {
  const size_t at = s.find(marker);
  if (at != std::string::npos) s.replace(at, marker.size(), with);
  return s;
}

}  // namespace

Dashboard::Dashboard(DashboardOptions options, const ParameterStore* store)
    : opt_(std::move(options)), store_(store) {
  page_ = Replace(std::string(assets::kPage, assets::kPageSize), "<!-- GP:CHARTJS -->",
                  "<script src=\"chart.js\"></script>");
  page_ =
      Replace(page_, "<!-- GP:APPENDJS -->",
              "<script>\n" + std::string(assets::kAppendJs, assets::kAppendJsSize) + "</script>");
  page_ = Replace(page_, "<!-- GP:DATA -->", "");
}

std::string Dashboard::RowJson(const proto::WorkerRow& r) {
  JsonLine j;
  j.Int("rank", r.rank());
  switch (r.kind()) {
    case proto::WorkerRow::STEP: {
      j.Int("step", r.step());
      // Every metric field of the row (worker/client/step_metrics.cc fills them by name), in the
      // message's order (int32 counters only when non-zero): the fields of the other kinds of
      // row are not a step's.
      const google::protobuf::Descriptor* d = r.GetDescriptor();
      const google::protobuf::Reflection* reflect = r.GetReflection();
      for (int i = 0; i < d->field_count(); ++i) {
        const google::protobuf::FieldDescriptor* f = d->field(i);
        if (!StepMetricField(f->name())) continue;
        switch (f->cpp_type()) {
          case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
            j.Num(f->name(), reflect->GetDouble(r, f));
            break;
          case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
            j.Int(f->name(), static_cast<int64_t>(reflect->GetUInt64(r, f)));
            break;
          case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
            if (reflect->GetInt32(r, f) != 0) j.Int(f->name(), reflect->GetInt32(r, f));
            break;
          default:
            break;
        }
      }
      break;
    }
    case proto::WorkerRow::EPOCH:
      j.Int("epoch", r.epoch())
          .Int("step", r.step())
          .Num("train_acc", r.train_acc())
          .Num("test_acc", r.test_acc());
      break;
    case proto::WorkerRow::CODEC:
      j.Int("epoch", r.epoch())
          .Int("step", r.step())
          .Str("push_codec", Label(r.push_codec()))
          .Int("rung", r.rung());
      break;
    case proto::WorkerRow::REJOIN:
      j.Int("step", r.step()).Str("event", "rejoin").Int("steps_lost", r.steps_lost());
      break;
    default:
      return "";
  }
  return j.Done();
}

void Dashboard::Add(const google::protobuf::RepeatedPtrField<proto::WorkerRow>& rows) {
  if (opt_.max_rows == 0) return;  // kept for nobody
  std::vector<std::string> json;
  for (int i = 0; i < std::min(rows.size(), kMaxRowsPerPush); ++i) {
    if (rows[i].rank() < 0 || rows[i].step() < 0) continue;
    std::string line = RowJson(rows[i]);
    if (!line.empty()) json.push_back(std::move(line));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& line : json) rows_.push_back(std::move(line));
  while (rows_.size() > opt_.max_rows) {
    rows_.pop_front();
    ++first_;
  }
}

std::string Dashboard::RowsJson(int64_t since, int64_t limit, bool with_workers) const {
  return RowsAnswer(since, limit, with_workers, ",\n", nullptr, nullptr);
}

std::string Dashboard::RowsAnswer(int64_t since, int64_t limit, bool with_workers, const char* sep,
                                  int64_t* next, int64_t* end_out) const {
  const std::string workers = with_workers ? ", \"workers\": " + WorkersObject() : "";
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t end = first_ + static_cast<int64_t>(rows_.size());
  const int64_t from = std::clamp(since, first_, end), to = std::min(end, from + limit);
  std::string out = "{\"next\": " + std::to_string(to) +
                    ", \"dropped\": " + std::to_string(std::max<int64_t>(0, first_ - since)) +
                    ", \"end\": " + std::to_string(end) + ", \"rows\": [";
  for (int64_t i = from; i < to; ++i) {
    if (i > from) out += sep;
    out += rows_[static_cast<size_t>(i - first_)];
  }
  if (next) *next = to;
  if (end_out) *end_out = end;
  return out + "]" + workers + "}\n";
}

std::string Dashboard::WorkersJson() const { return WorkersObject() + "\n"; }

std::string Dashboard::WorkersObject() const {
  const StoreStats s = store_->Stats();
  const auto now = Clock::now();
  std::string workers;
  for (const auto& [name, m] : store_->Members()) {
    const char* state = m.restored ? "register_again" : m.live ? "live" : "dropped";
    const double seen = std::chrono::duration<double>(now - m.last_seen).count();
    workers +=
        (workers.empty() ? "" : ", ") + JsonLine()
                                            .Str("name", name)
                                            .Int("rank", m.rank)
                                            .Str("state", state)
                                            .Int("incarnation", static_cast<int64_t>(m.incarnation))
                                            .Num("last_seen_s", m.restored ? -1 : seen)
                                            .Int("rejoins", std::max(0, m.joins - 1))
                                            .Done();
  }
  return JsonLine()
      .Str("job", opt_.job)
      .Int("shard", opt_.shard)
      .Int("shards", opt_.shards)
      .Int("server_step", s.steps)
      .Int("bytes_in", static_cast<int64_t>(s.bytes_in))
      .Int("bytes_out", static_cast<int64_t>(s.bytes_out))
      .Int("live_workers", s.live_workers)
      .Raw("workers", "[" + workers + "]")
      .Done();
}

bool Dashboard::Authorized(const HttpRequest& r) const {
  if (opt_.token.empty()) return true;
  const auto h = r.headers.find("authorization");
  if (h != r.headers.end() && h->second.rfind("Bearer ", 0) == 0)
    return SameSecret(h->second.substr(7), opt_.token);
  const auto q = r.query.find("token");
  return q != r.query.end() && SameSecret(q->second, opt_.token);
}

HttpResponse Dashboard::Handle(const HttpRequest& r) const {
  if (r.path == "/metrics")
    return Answer("text/plain; version=0.0.4",
                  store_->Stats().Prometheus() +
                      "# HELP gradpress_dashboard_requests_total Dashboard page and api answers"
                      " (a stream: its opening and each line).\n"
                      "# TYPE gradpress_dashboard_requests_total counter\n"
                      "gradpress_dashboard_requests_total " +
                      std::to_string(served_.load()) + "\n");
  if (r.path == "/chart.js")
    return Answer("application/javascript", std::string(assets::kChartJs, assets::kChartJsSize));
  const bool api = r.path.rfind("/api/", 0) == 0;
  if (!api && r.path != "/" && r.path != "/index.html") return Error(404, "no page " + r.path);
  if (!Authorized(r))
    return Error(401, "this dashboard needs the job's token: open /?token=<security.token_file>");
  if (r.path == "/" || r.path == "/index.html") {
    ++served_;
    return Answer("text/html; charset=utf-8", page_);
  }
  if (r.path == "/api/workers") {
    ++served_;
    return Json(WorkersJson());
  }
  int64_t s = 0;
  bool with_workers = false;
  if (r.path == "/api/rows") {
    const auto limit = r.query.find("limit");
    const int64_t n = limit == r.query.end() ? kDefaultLimit : Count(limit->second);
    if (const std::string bad = RowsQuery(r, &s, &with_workers); !bad.empty())
      return Error(400, bad);
    if (n < 1 || n > kMaxLimit)
      return Error(400, "limit must be 1 to " + std::to_string(kMaxLimit));
    ++served_;
    return Json(RowsJson(s, n, with_workers));
  }
  if (r.path == "/api/stream") {
    if (const std::string bad = RowsQuery(r, &s, &with_workers); !bad.empty())
      return Error(400, bad);
    const auto every = r.query.find("every");
    double every_s = 1;
    if (every != r.query.end()) {
      char* stop = nullptr;
      every_s = std::strtod(every->second.c_str(), &stop);
      if (every->second.empty() || *stop != '\0' || !(every_s >= 0.2 && every_s <= 3600))
        return Error(400, "every must be 0.2 to 3600 (seconds)");
    }
    ++served_;
    HttpResponse resp;
    resp.content_type = "application/x-ndjson";
    resp.headers["X-Accel-Buffering"] = "no";  // a proxy in front passes each line on at once
    const int every_ms = static_cast<int>(every_s * 1000 + 0.5);
    resp.stream = [this, cursor = s, with_workers, every_ms](std::string* chunk) mutable {
      int64_t end = 0;
      *chunk = RowsAnswer(cursor, kDefaultLimit, with_workers, ",", &cursor, &end);
      ++served_;
      return cursor < end ? 0 : every_ms;  // behind (a page opened late): the rest at once
    };
    return resp;
  }
  return Error(404, "no api " + r.path + " (api/rows, api/stream, api/workers)");
}

}  // namespace gradpress::server
