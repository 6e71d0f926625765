#!/usr/bin/env python3
"""The median step_ms of rank 0 in a run directory's metrics.jsonl, from a step on.

    scripts/median_step.py RUN_DIR [FROM_STEP]     # FROM_STEP default 2 (warm-up left out)

Prints it with one decimal; exits 1 when no row of rank 0 at or after FROM_STEP exists.
"""
import json
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    first = int(sys.argv[2]) if len(sys.argv) == 3 else 2
    with open(sys.argv[1] + "/metrics.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    ms = sorted(r["step_ms"] for r in rows
                if r.get("rank") == 0 and "step_ms" in r and r.get("step", 0) >= first)
    if not ms:
        sys.exit(f"median_step.py: no step of rank 0 from step {first} in {sys.argv[1]}")
    print(f"{ms[len(ms) // 2]:.1f}")


if __name__ == "__main__":
    main()
