#!/usr/bin/env python3
"""The live dashboard extends its lines in place, and they equal the lines built whole
(server/dashboard/index.html, extendLine and extendBytes).

A fake server (dashboard_live_fake.make_handler) serves 2 workers x 6000 steps, 499 rows a
poll, so that a poll often ends between the two workers' rows of a step; lines pass
MAX_POINTS (5000), so their older points are thinned; worker 1 runs steps 2500..2519 again
after a rejoin, so drawn points change. Once every row is shown, a script added to the page
records every chart's data, builds every line again from all rows at once, and compares.
Checks: the two are equal, point for point; the loss line was built whole far fewer times than
the page refreshed (it was extended in place); every line holds at most 5000 points.
Exit 0 on success, 1 naming the failed check.

  dashboard_lines_test.py SOURCE_DIR"""
import os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_live_fake as fake  # noqa: E402

STEPS, PAGE, RERUN = 6000, 499, range(2500, 2520)

CHECK = """<script>
'use strict';
(function check() {
  if (typeof charts === 'undefined' || !charts || st.rows < %d || st.frontier < %d) return setTimeout(check, 50);
  const out = document.body.appendChild(document.createElement('div'));
  out.id = 'gp-check';
  const snap = () => JSON.stringify(Object.entries(charts).map(([k, c]) =>
    [k, c.data.datasets.map((d) => [d.label, d.data])]));
  const renders = st.renders, builds = st.lines.get('loss0').builds;
  const most = Math.max(...[...st.lines.values()].map((l) => l.data.length));
  const extended = snap();
  st.lines.clear(); bytes.built = -1; st.dirty = true;
  render([]);
  const whole = snap();
  out.setAttribute('data-result', [extended === whole, renders, builds, most, extended.length].join(','));
  if (extended !== whole) {
    const a = JSON.parse(extended), b = JSON.parse(whole);
    out.setAttribute('data-diff', JSON.stringify(a.map((c, i) => [c[0], c[1].map((d, j) => {
      const e = b[i][1][j] || [null, []], k = d[1].findIndex((p, n) => JSON.stringify(p) !== JSON.stringify(e[1][n]));
      return [d[0], d[1].length, e[1].length, k, d[1][k], e[1][k]];
    })])));
  }
})();
</script>
"""


def fixture():
    rows = []
    for s in range(STEPS):
        for r in (0, 1) if s % 3 else (1, 0):
            rows.append({"rank": r, "step": s, "loss": 2.0 / (1 + s / 400) + 0.01 * r + 0.003 * (s % 7),
                         "bytes_up": 1500 + 37 * (s % 11) + r, "bytes_down": 1550 + (s % 5),
                         "compute_ms": 8, "encode_ms": 0.3, "decode_ms": 0.03, "network_ms": 1.7,
                         "wait_ms": 0.7, "step_ms": 11 + (s * 7 + r) % 5})
        if s == 2530:
            rows.append({"rank": 1, "step": RERUN[0], "event": "rejoin", "steps_lost": len(RERUN)})
            rows += [{"rank": 1, "step": t, "loss": 0.5, "bytes_up": 900, "bytes_down": 900,
                      "compute_ms": 8, "encode_ms": 0.3, "decode_ms": 0.03, "network_ms": 1.7,
                      "wait_ms": 0.7, "step_ms": 30} for t in RERUN]
        if s % 1000 == 999:
            rows += [{"rank": r, "epoch": s // 1000, "step": s + 1, "train_acc": 0.8,
                      "test_acc": 0.7 + s / 1e5} for r in (0, 1)]
    return rows


def main():
    if len(sys.argv) < 2:
        fake.fail("usage: dashboard_lines_test.py SOURCE_DIR")
    rows = fixture()
    dom, state, tag = fake.checked_page(sys.argv[1], rows, CHECK % (len(rows), STEPS - 1), PAGE,
                                        15000)
    if not tag:
        status = re.search(r'<div id="gp-status"[^>]*>([^<]*)<', dom)
        fake.fail(f"the check did not run: {state['polls']} polls for {len(rows)} rows; "
                  f"status: {status and status.group(1)}")
    same, renders, builds, most, size = re.search(r' data-result="([^"]*)"', tag).group(1).split(",")
    print(f"dashboard_lines_test: {renders} refreshes drew; the loss line of worker 0 was built "
          f"whole {builds} times; longest line {most} points", flush=True)
    if same != "true":
        diff = re.search(r' data-diff="([^"]*)"', tag)
        fake.fail("the lines extended in place differ from the lines built whole: " +
                  (diff.group(1).replace("&quot;", '"')[:3000] if diff else "?"))
    if int(most) > 5000:
        fake.fail(f"a line holds {most} points, more than MAX_POINTS (5000)")
    if int(builds) * 2 > int(renders):
        fake.fail(f"the loss line was built whole {builds} times in {renders} refreshes: "
                  "it is not extended in place")
    print(f"dashboard_lines_test: OK ({len(rows)} rows, {state['polls']} polls, "
          f"{int(size)} bytes of chart data compared)")


if __name__ == "__main__":
    main()
