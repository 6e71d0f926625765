"""scripts/compare.sh's table and plot from DIR/results.jsonl (one object per run).

Per workload, link rate, worker count and method, over its rounds: the median step (ms) with
its spread (min-max), bytes sent and received per worker per step, the final test accuracy,
the training time to the target (median; '-' if a round missed it) and its ratio to the best
DDP hook's in the same cell (< 1: gradpress's method was faster). Writes DIR/table.txt and,
where gnuplot is installed, DIR/time_to_target.png (time to target against link rate, one line
per method, 2 workers or the fewest run).

    /usr/bin/python3 scripts/lib/compare_table.py DIR
"""
import json
import os
import shutil
import statistics
import subprocess
import sys

RATE_ORDER = {"100mbit": 0, "1gbit": 1, "none": 2}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cells(runs):
    out = {}
    for r in runs:
        key = (r["workload"], r["rate"], r["workers"], r["label"])
        out.setdefault(key, []).append(r)
    return out


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary(rs):
    steps = [r["median_step_ms"] for r in rs if r["median_step_ms"] is not None]
    ttt = [r["time_to_target_s"] for r in rs]
    return {
        "rounds": len(rs),
        "step": med(steps), "lo": min(steps) if steps else None, "hi": max(steps) if steps else None,
        "tx": med([r["tx_per_step"] for r in rs]), "rx": med([r["rx_per_step"] for r in rs]),
        "acc": med([r["final_acc"] for r in rs]),
        "ttt": None if any(t is None for t in ttt) else med(ttt),
        "missed": sum(t is None for t in ttt),
    }


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def main():
    d = sys.argv[1]
    runs = load(os.path.join(d, "results.jsonl"))
    if not runs:
        sys.exit(f"compare_table: no runs in {d}/results.jsonl")
    table = {k: summary(v) for k, v in cells(runs).items()}
    lines = [f"{'workload':8} {'rate':>7} {'W':>2} {'method':10} {'rounds':>6} {'step_ms':>8} "
             f"{'spread':>13} {'sent/step':>10} {'recv/step':>10} {'final_acc':>9} "
             f"{'t_target_s':>10} {'vs_ddp':>6}"]
    order = sorted(table, key=lambda k: (k[0], RATE_ORDER.get(k[1], 9), k[1], k[2],
                                         not k[3].startswith("ddp"), k[3]))
    for k in order:
        s = table[k]
        ddp = [table[o]["ttt"] for o in table
               if o[:3] == k[:3] and o[3].startswith("ddp") and table[o]["ttt"] is not None]
        ratio = s["ttt"] / min(ddp) if s["ttt"] is not None and ddp else None
        spread = (f"{s['lo']:.1f}-{s['hi']:.1f}" if s["lo"] is not None else "-")
        missed = f" ({s['missed']} missed)" if s["missed"] else ""
        lines.append(f"{k[0]:8} {k[1]:>7} {k[2]:>2} {k[3]:10} {s['rounds']:>6} "
                     f"{fmt(s['step'], '.1f'):>8} {spread:>13} {fmt(s['tx'], '.0f'):>10} "
                     f"{fmt(s['rx'], '.0f'):>10} {fmt(s['acc'], '.4f'):>9} "
                     f"{fmt(s['ttt'], '.1f'):>10} {fmt(ratio, '.2f'):>6}{missed}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(d, "table.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    plot(d, table)


def plot(d, table):
    if shutil.which("gnuplot") is None:
        print("compare_table: gnuplot not installed: no plot", file=sys.stderr)
        return
    rated = [k for k in table if table[k]["ttt"] is not None]
    if not rated:
        return
    workers = min(k[2] for k in rated)
    rates = sorted({k[1] for k in rated}, key=lambda r: RATE_ORDER.get(r, 9))
    labels = sorted({k[3] for k in rated if k[2] == workers})
    data = os.path.join(d, "time_to_target.dat")
    with open(data, "w") as f:
        for label in labels:
            f.write(f'"{label}"\n')
            for i, rate in enumerate(rates):
                s = table.get((rated[0][0], rate, workers, label))
                if s and s["ttt"] is not None:
                    f.write(f"{i} {s['ttt']:.2f} {rate}\n")
            f.write("\n\n")
    script = (f'set terminal png size 900,600\nset output "{d}/time_to_target.png"\n'
              f'set title "time to target, {workers} workers (star topology)"\n'
              'set ylabel "training time to target (s)"\nset xlabel "link rate"\n'
              'set key outside right\nset xtics (' +
              ", ".join(f'"{r}" {i}' for i, r in enumerate(rates)) + ')\n'
              f'plot for [i=0:{len(labels) - 1}] "{data}" index i using 1:2 with linespoints '
              'title columnheader(1)\n')
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"compare_table: {d}/time_to_target.png", file=sys.stderr)


if __name__ == "__main__":
    main()
