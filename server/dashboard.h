#pragma once
// Dashboard: the live view of a job on the server's HTTP port (server.metrics_port, bound to
// server.metrics_host). Workers piggy-back their metrics.jsonl rows on the pushes they make
// anyway (PushHeader.rows; Add keeps them, up to max_rows); the page
// (server/dashboard/index.html, Chart.js from Debian's libjs-chart.js, both embedded at build
// time) reads their JSON every second.
//
//   GET /                  the page            (token, if set)
//   GET /chart.js          Chart.js            (public library code: no token)
//   GET /api/rows?since=N  {"next", "dropped", "rows": [...]}: rows N.. (metrics.jsonl names);
//       &workers=1         and "workers": /api/workers' answer, so a page polls once a refresh
//   GET /api/stream?since=N&every=S[&workers=1]  the same answers as one line each, rows
//                          joined by "," (NDJSON), on one open connection: one at once, then
//                          one every S seconds (default 1; 0.2 to 3600), back to back while
//                          next < end. What the page reads once it has caught up: a browser
//                          takes a line on an open connection for far less than a request.
//   GET /api/workers       job, shard, step, bytes, and each worker's state
//   GET /metrics           Prometheus text     (no token, as before the dashboard), with
//                          gradpress_dashboard_requests_total (page and api answers)
//
// With a token (security.token_file), the page and /api need "Authorization: Bearer T" or
// ?token=T (the page passes its own on to its requests); otherwise 401. Bad requests get 400,
// unknown paths 404; nothing here blocks a training call (rows are appended under a lock of
// their own).
// Thread-safety: Add and Handle may run concurrently.
#include <google/protobuf/repeated_field.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "proto/gradpress.pb.h"
#include "server/http_endpoint.h"

namespace gradpress::server {

class ParameterStore;

struct DashboardOptions {
  std::string job;    // the config's name
  std::string token;  // required for the page and /api; empty: none
  int shard = 0, shards = 1;
  // Oldest rows dropped beyond this; 0 keeps none (a server without an HTTP port: nobody
  // could read them, and they would grow its memory by ~300 bytes a worker a step).
  size_t max_rows = 200000;
};

class Dashboard {
 public:
  Dashboard(DashboardOptions options, const ParameterStore* store);
  void set_job(const std::string& job) { opt_.job = job; }  // before the port serves
  void set_max_rows(size_t n) { opt_.max_rows = n; }        // before the server starts
  bool needs_token() const { return !opt_.token.empty(); }

  // A push's rows from `worker` (registered: the store accepted its push), as JSON rows.
  void Add(const google::protobuf::RepeatedPtrField<proto::WorkerRow>& rows);
  HttpResponse Handle(const HttpRequest& r) const;

  // The API bodies (also for tests). since: the first row wanted (rows dropped before it
  // are skipped); at most `limit` rows; "end": the row after the last one held, so next < end
  // says more rows wait (a page opened late catches up at once); with_workers: WorkersJson's
  // object as "workers".
  std::string RowsJson(int64_t since, int64_t limit, bool with_workers = false) const;
  std::string WorkersJson() const;
  static std::string RowJson(const proto::WorkerRow& row);

 private:
  bool Authorized(const HttpRequest& r) const;
  // RowsJson with rows joined by `sep`; next and end (either may be null) get the answer's.
  std::string RowsAnswer(int64_t since, int64_t limit, bool with_workers, const char* sep,
                         int64_t* next, int64_t* end) const;
  std::string WorkersObject() const;  // WorkersJson without its newline
  DashboardOptions opt_;
  const ParameterStore* store_;
  std::string page_;  // the template with its markers replaced for live serving
  mutable std::atomic<uint64_t> served_{0};  // page and api requests answered 200
  mutable std::mutex mu_;
  std::deque<std::string> rows_;
  int64_t first_ = 0;  // index of rows_.front()
};

}  // namespace gradpress::server
