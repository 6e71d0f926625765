#!/usr/bin/env python3
"""The live dashboard draws what a refresh appended without redrawing the chart
(server/dashboard/append.js, drawAppended; the accuracy charts' dots too), redraws only the bars
of the phases chart (redrawBars), and those pictures are the charts' own.

A fake server (dashboard_live_fake.make_handler) serves 2 workers x 400 steps whose values stay
within the axes the first page sets, and a test accuracy for each every 40 steps (an epoch),
rising within the accuracy axis the first one sets, 40 rows a poll; the page runs in headless
Chromium at refresh=0.2. Once every row is shown, a script added to the page checks each line chart:
  - refreshes appended (chart.gpAppends; the phases chart: redrew only its bars,
    chart.gpBarRedraws) and the last one did too (the chart is stale);
  - what Chart.js draws by itself (chart.render(), as on hover or resize) lays out every point
    first, and its pixels equal the appended picture's, but for antialiasing at the joints
    (at most 0.1% of the canvas differs by more than 96 in r + g + b; the accuracy charts, whose
    dots are drawn whole: 0.01%, which dots a pixel too large exceed; the bars: none).
Exit 0 on success, 1 naming the failed check.

  dashboard_append_test.py SOURCE_DIR"""
import math, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_live_fake as fake  # noqa: E402

STEPS, PAGE = 400, 40
CHARTS = ("steptime", "bytes", "lossStep", "lossBytes", "accStep", "accBytes", "phases")

CHECK = """<script>
'use strict';
(function check() {
  if (typeof charts === 'undefined' || !charts || st.rows < %d) return setTimeout(check, 50);
  const out = document.body.appendChild(document.createElement('div'));
  out.id = 'gp-check';
  for (const key of %s) {
    const c = charts[key], w = c.canvas.width, h = c.canvas.height;
    const before = c.ctx.getImageData(0, 0, w, h).data, stale = !!c.gpStale;
    c.render();   // what Chart.js does on hover or resize
    const after = c.ctx.getImageData(0, 0, w, h).data;
    let diff = 0;
    for (let i = 0; i < before.length; i += 4) {
      const d = Math.abs(before[i] - after[i]) + Math.abs(before[i + 1] - after[i + 1]) +
                Math.abs(before[i + 2] - after[i + 2]);
      if (d > 96) diff++;
    }
    const laid = c.data.datasets.every((d, i) => c.getDatasetMeta(i).data.length === d.data.length);
    out.setAttribute('data-' + key.toLowerCase(),
                     [(key === 'phases' ? c.gpBarRedraws : c.gpAppends) || 0, stale, laid, diff, w * h].join(','));
  }
})();
</script>
"""


def fixture():
    rows = [{"rank": r, "epoch": 0, "step": 3, "push_codec": "topk ratio=0.01"} for r in (0, 1)]
    for s in range(STEPS):
        for r in (0, 1):
            rows.append({"rank": r, "step": s, "loss": 1.0 + 0.4 * math.sin(0.7 * s) + 0.05 * r,
                         "bytes_up": 1500 + int(100 * math.sin(s)), "bytes_down": 1550,
                         "compute_ms": 8 + 0.5 * math.sin(0.9 * s + r), "encode_ms": 0.3,
                         "decode_ms": 0.03, "network_ms": 1.7 + 0.2 * math.cos(s), "wait_ms": 0.7,
                         "step_ms": 11 + 2 * math.sin(1.3 * s + r)})
        if s % 40 == 39:   # an epoch's end: its row carries the next step, as a worker's does
            rows += [{"rank": r, "epoch": s // 40, "step": s + 1, "train_acc": 0.7,
                      "test_acc": 0.62 + 0.02 * (s // 40) + 0.01 * r} for r in (0, 1)]
    return rows


def main():
    if len(sys.argv) < 2:
        fake.fail("usage: dashboard_append_test.py SOURCE_DIR")
    rows = fixture()
    dom, state, tag = fake.checked_page(sys.argv[1], rows, CHECK % (len(rows), list(CHARTS)),
                                        PAGE, 12000)
    status = re.search(r'<div id="gp-status"[^>]*>([^<]*)<', dom)
    if not status or not status.group(1).startswith("live:"):
        fake.fail(f"status line: {status and status.group(1)}")
    if not tag:
        fake.fail(f"the check did not run: {state['polls']} polls for {len(rows)} rows")
    report = []
    for key in CHARTS:
        m = re.search(r' data-%s="([^"]*)"' % key.lower(), tag)
        appends, stale, laid, diff, pixels = m.group(1).split(",")
        what = "bars-only" if key == "phases" else "appended"
        report.append(f"{key}: {appends} {what} refreshes, {diff} of {pixels} pixels differ "
                      "from the whole drawing")
        print("dashboard_append_test: " + report[-1], flush=True)
        if int(appends) < 3:
            fake.fail(f"{key}: {appends} {what} refreshes, expected at least 3")
        if stale != "true":
            fake.fail(f"{key}: the last refresh drew the whole chart, expected it {what}")
        if laid != "true":
            fake.fail(f"{key}: Chart.js drew without laying out the appended points")
        limit = {"phases": 0, "accStep": 1e-4, "accBytes": 1e-4}.get(key, 1e-3) * int(pixels)
        if int(diff) > limit:
            fake.fail(f"{key}: {diff} of {pixels} pixels differ from the chart drawn whole")
    print(f"dashboard_append_test: OK ({len(rows)} rows, {state['polls']} polls)")


if __name__ == "__main__":
    main()
