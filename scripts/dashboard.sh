#!/usr/bin/env bash
# A self-contained HTML dashboard of one run, made from its metrics.jsonl: the live dashboard's
# page (server/dashboard/index.html) with Chart.js inlined and the rows embedded, so it opens
# offline in any browser (no server, no CDN). Prints the path it wrote.
#
#   scripts/dashboard.sh runs/lenet-fmnist-m5/<ts>              # -> runs/.../<ts>/dashboard.html
#   scripts/dashboard.sh runs/lenet-fmnist-m5/<ts> /tmp/d.html
#
# Needs Debian's libjs-chart.js (Chart.js 3.9.1); GP_CHARTJS=FILE uses another copy of its UMD
# build. The job name shown is the run directory's name (<meta name="gp-job">).
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: scripts/dashboard.sh RUN_DIR [OUT.html]" >&2; exit 2; }
run=$1
out=${2:-$run/dashboard.html}
template=$(cd "$(dirname "$0")/.." && pwd)/server/dashboard/index.html
appendjs=$(dirname "$template")/append.js
chartjs=${GP_CHARTJS:-/usr/share/javascript/chart.js/chart.min.js}

[[ -d "$run" ]] || { echo "dashboard.sh: run directory $run not found" >&2; exit 1; }
[[ -f "$run/metrics.jsonl" ]] || { echo "dashboard.sh: $run/metrics.jsonl not found" >&2; exit 1; }
[[ -r "$run/metrics.jsonl" ]] || { echo "dashboard.sh: $run/metrics.jsonl not readable" >&2; exit 1; }
[[ -f "$chartjs" ]] || {
  echo "dashboard.sh: Chart.js not found at $chartjs (apt-get install libjs-chart.js)" >&2; exit 1; }
[[ -f "$template" ]] || { echo "dashboard.sh: template $template not found" >&2; exit 1; }
[[ -f "$appendjs" ]] || { echo "dashboard.sh: $appendjs not found" >&2; exit 1; }
for m in '<!-- GP:CHARTJS -->' '<!-- GP:APPENDJS -->' '<!-- GP:DATA -->'; do
  [[ $(grep -cxF -- "$m" "$template") == 1 ]] || {
    echo "dashboard.sh: $template must hold the line '$m' exactly once" >&2; exit 1; }
done
# Chart.js goes inside <script>...</script> as it is: it must not close that element itself.
if grep -qi '</script' "$chartjs"; then
  echo "dashboard.sh: $chartjs contains '</script' and cannot be inlined" >&2; exit 1
fi

[[ -d "$(dirname "$out")" ]] || { echo "dashboard.sh: directory of $out not found" >&2; exit 1; }
job=$(basename "$(cd "$run" && pwd)")
tmp=$(mktemp "$(dirname "$out")/.dashboard.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# awk reads the files itself (getline) and never uses gsub or -v on text or paths, so backslashes
# and '&' pass through verbatim. In the rows every '<' becomes \u003c: a '<' can only stand
# inside a JSON string, where \u003c means the same, and no '</script' or '<!--' survives to
# end the script element early. The job name is HTML-escaped for the meta attribute.
GP_JOB=$job GP_CHART=$chartjs GP_APPEND=$appendjs GP_ROWS=$run/metrics.jsonl awk '
  function replace_all(s, from, to,   out, i) {
    out = ""
    while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) }
    return out s
  }
  function html_attr(s) {
    s = replace_all(s, "&", "&amp;"); s = replace_all(s, "\"", "&quot;")
    return replace_all(replace_all(s, "<", "&lt;"), ">", "&gt;")
  }
  function inline(file,   line) {
    print "<script>"
    while ((getline line < file) > 0) print line
    close(file)
    print "</script>"
  }
  BEGIN { rows = ENVIRON["GP_ROWS"] }
  $0 == "<!-- GP:CHARTJS -->" { inline(ENVIRON["GP_CHART"]); next }
  $0 == "<!-- GP:APPENDJS -->" { inline(ENVIRON["GP_APPEND"]); next }
  $0 == "<!-- GP:DATA -->" {
    print "<meta name=\"gp-job\" content=\"" html_attr(ENVIRON["GP_JOB"]) "\">"
    print "<script id=\"gp-rows\" type=\"application/x-ndjson\">"
    while ((getline line < rows) > 0) print replace_all(line, "<", "\\u003c")
    close(rows)
    print "</script>"
    next
  }
  { print }
' "$template" >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
