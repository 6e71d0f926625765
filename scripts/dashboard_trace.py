#!/usr/bin/env python3
"""Where an open dashboard page's time goes in the browser: the page in Debian's headless
Chromium against scripts/dashboard_cpu.py's fake job (the main job's rate), traced with
Chromium's own startup tracing (--trace-startup, JSON). Prints, from --skip seconds after the
page opened to --seconds:
  - the display compositor's draws (software compositing on a GPU-less machine): draws and ms
    a second, and by damage rectangle (the region a draw composited again) draws and ms each;
  - each process's threads: busy ms a second (their outermost trace events, so tracing's own
    cost is in the figures; compare pages within one run, not with dashboard_cpu.py's CPU);
  - V8's background compiles (Maglev / TurboFan tasks): ms a second.
Pages given with --rev (a git revision's server/dashboard/) are traced too, after the tree's.

  scripts/dashboard_trace.py                    # the working tree's page, 25 s from 10 s
  scripts/dashboard_trace.py --rev 08e4550      # and 08e4550's, in the same run
  scripts/dashboard_trace.py --keep DIR         # also keep each trace (DIR/<name>.json, as written)

Run as root, Chromium runs as `nobody`. Needs chromium and libjs-chart.js (scripts/setup.sh)."""
import argparse, collections, json, os, shutil, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_cpu  # noqa: E402

CATEGORIES = "cc,viz,blink,gpu,v8,toplevel,benchmark"


def trace(source_dir, args, keep=None):
    """Chromium's trace events of the page, as a list; keep: a path to copy the trace to."""
    flags = lambda profile: (f"--trace-startup={CATEGORIES}",  # noqa: E731
                             f"--trace-startup-duration={args.seconds:g}",
                             "--trace-startup-format=json",
                             "--trace-startup-file=" + os.path.join(profile, "trace.json"))
    with dashboard_cpu.open_page(source_dir, args, flags=flags) as (profile, _):
        path, size = os.path.join(profile, "trace.json"), -1
        deadline = time.monotonic() + args.seconds + 60
        while time.monotonic() < deadline:  # written when tracing ends; done once it stops growing
            time.sleep(2)
            now = os.path.getsize(path) if os.path.exists(path) else -1
            if now > 0 and now == size:
                break
            size = now
        else:
            sys.exit(f"dashboard_trace.py: Chromium wrote no trace to {path}")
        if keep:
            shutil.copyfile(path, keep)
        with open(path) as f:
            data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def summarize(events, skip):
    """The report (see the header) of a trace's events from `skip` seconds in."""
    names, procs = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    spans = sorted((e for e in events if e.get("ph") == "X" and "dur" in e),
                   key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    if not spans:
        sys.exit("dashboard_trace.py: the trace holds no events")
    t0 = min(e["ts"] for e in spans) + skip * 1e6
    t1 = max(e["ts"] + e["dur"] for e in spans)
    seconds = (t1 - t0) / 1e6
    busy, end, compiles = collections.Counter(), {}, 0
    draws = collections.defaultdict(list)  # damage rectangle -> each draw's µs
    draw = None
    for e in spans:
        if e["ts"] < t0:
            continue
        where = (e["pid"], e["tid"])
        if e["ts"] >= end.get(where, 0):  # outermost: not inside the thread's previous event
            end[where] = e["ts"] + e["dur"]
            busy[(procs.get(e["pid"], "?"), names.get(where, "?"))] += e["dur"]
            func = e.get("args", {}).get("src_func", "")
            if "maglev" in func.lower() or "OptimizingCompile" in func:
                compiles += e["dur"]
        if e["name"] == "Display::DrawAndSwap":
            draw = e
        elif (e["name"] == "DirectRenderer::DrawFrame ProcessForOverlays" and draw and
              draw["pid"] == e["pid"] and draw["ts"] <= e["ts"] <= draw["ts"] + draw["dur"]):
            draws[e.get("args", {}).get("root_damage_rect", "?")].append(draw["dur"])
    n = sum(len(v) for v in draws.values())
    out = [f"  compositor: {n / seconds:.2f} draws a second, "
           f"{sum(map(sum, draws.values())) / 1e3 / seconds:.2f} ms a second; by damage rectangle:"]
    for rect, us in sorted(draws.items(), key=lambda kv: -sum(kv[1]))[:4]:
        out.append(f"    {rect}: {len(us)} draws, {sum(us) / 1e3 / len(us):.2f} ms each")
    out.append(f"  V8 background compiles: {compiles / 1e3 / seconds:.2f} ms a second")
    for (proc, thread), us in busy.most_common(12):
        out.append(f"  {us / 1e3 / seconds:6.2f} ms a second  {proc} / {thread}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", help="a directory to keep each trace in")
    args = dashboard_cpu.page_args(ap, "trace")
    with dashboard_cpu.revision_pages(args.rev) as revs:
        for name, src in [("tree", dashboard_cpu.ROOT)] + revs:
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
            events = trace(src, args, args.keep and os.path.join(args.keep, name + ".json"))
            print(f"{name}: {args.seconds - args.skip:g} s from {args.skip:g} s after the page opened")
            print(summarize(events, args.skip), flush=True)


if __name__ == "__main__":
    main()
