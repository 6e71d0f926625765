#!/usr/bin/env python3
"""Per run directory, the median of each *_ms field of metrics.jsonl over both ranks' steps
from --skip on (the first steps allocate pinned buffers, device scratch and streams).

    python3 scripts/gpu/step_medians.py /tmp/gp-runs/* --skip 20
"""
import argparse
import json
import pathlib
import statistics

FIELDS = ["step_ms", "compute_ms", "encode_ms", "decode_ms", "network_ms", "wait_ms",
          "exposed_comm_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=pathlib.Path)
    ap.add_argument("--skip", type=int, default=20, help="steps left out at the start")
    a = ap.parse_args()
    print("run".ljust(28) + "".join(f[:-3].replace("_comm", "").rjust(10) for f in FIELDS) + "  steps")
    for run in a.runs:
        f = run / "metrics.jsonl"
        if not f.is_file():
            print(f"{run.name}: no metrics.jsonl")
            continue
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if r.get("step", 0) >= a.skip]
        if not rows:
            print(f"{run.name}: no step from {a.skip} on")
            continue
        meds = [statistics.median(r.get(k, 0.0) for r in rows) for k in FIELDS]
        print(run.name.ljust(28) + "".join(f"{m:10.2f}" for m in meds) + f"  {len(rows)}")


if __name__ == "__main__":
    main()
