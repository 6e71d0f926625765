#!/usr/bin/env python3
"""The table of `scripts/run.sh --table DIR...`: one row per run directory, from its
summary.json and rank 0's last epoch line of metrics.jsonl. The time columns are every
summary.json field ending in _ms, in the order the first run's summary holds them (the worker
writes them from its one list of metrics, worker/client/step_metrics.cc), so a new metric shows here
without a change to this script.

  summary_table.py DIR...

Times are ms per step; bytes are payload bytes per worker per step; MB_total is one worker's
payload MB up + down over the run. A directory without summary.json is reported on stderr."""
import json
import os
import sys


def last_epoch(path):
    """rank 0's last epoch line of metrics.jsonl ({} when there is none)."""
    last = {}
    if not os.path.exists(path):
        return last
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            o = json.loads(line)
            if o.get("rank") == 0 and "epoch" in o and "test_acc" in o:
                last = o
    return last


def main(dirs):
    runs = []
    for d in dirs:
        p = os.path.join(d, "summary.json")
        if not os.path.exists(p):
            print(f"run.sh: {p} missing", file=sys.stderr)
            continue
        with open(p) as f:
            runs.append((json.load(f), last_epoch(os.path.join(d, "metrics.jsonl"))))
    if not runs:
        return 0
    ms = [k for k in runs[0][0] if k.endswith("_ms")]
    head = ["run", "test_acc", "train_acc", "bytes_up/st", "bytes_dn/st", "ratio_up", "ratio_dn"]
    head += [k[:-3] for k in ms] + ["MB_total", "wall_s", "overlap"]
    widths = [24, 8, 9, 13, 13, 9, 9] + [max(8, len(k) - 2) for k in ms] + [8, 7, 7]
    print()
    print(" ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for s, epoch in runs:
        cells = [str(s.get("name", "")), f"{s.get('test_acc', 0):.4f}",
                 f"{epoch.get('train_acc', 0):.4f}", f"{s.get('bytes_up_per_step', 0):.0f}",
                 f"{s.get('bytes_down_per_step', 0):.0f}", f"{s.get('ratio_up', 0):.1f}",
                 f"{s.get('ratio_down', 0):.1f}"]
        cells += [f"{s.get(k, 0) or 0:.2f}" for k in ms]
        overlap = s.get("overlap")
        cells += [f"{epoch.get('bytes_total', 0) / 1e6:.1f}", f"{s.get('wall_s', 0):.1f}",
                  "-" if overlap is None else ("true" if overlap else "false")]
        print(" ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(cells, widths))))
    print("(times in ms per step; bytes are payload bytes per worker per step; MB_total: one "
          "worker's payload MB up + down over the run; plots: scripts/plot.sh " + " ".join(dirs) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
