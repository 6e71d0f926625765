#pragma once
// The dashboard's page (server/dashboard/index.html), its incremental drawing
// (server/dashboard/append.js, inlined into the page) and Chart.js (Debian's libjs-chart.js),
// embedded at build time by server/dashboard/embed.cmake. Each array ends with a 0 byte not
// counted in its size.
#include <cstddef>

namespace gradpress::server::assets {

extern const char kPage[];
extern const size_t kPageSize;
extern const char kAppendJs[];
extern const size_t kAppendJsSize;
extern const char kChartJs[];
extern const size_t kChartJsSize;

}  // namespace gradpress::server::assets
