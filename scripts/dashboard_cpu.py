#!/usr/bin/env python3
"""What an open dashboard page costs the machine it runs on, without a job: the page in Debian's
headless Chromium (1400x1900, refreshing every second) against a fake of the server's HTTP side
(tests/deploy/dashboard_live_fake.py's handler, api/stream included) whose rows grow at the main job's rate (2
workers, a step each every --step-ms, an evaluation row every 469 steps). Prints the CPU each of
Chromium's process types took, in % of one core, from --skip seconds after the page opened to
--seconds; pages given with --rev (a git revision's server/dashboard/) are measured too,
alternated with the working tree's in each round, so that they compare within one run.

  scripts/dashboard_cpu.py                       # the working tree's page, 3 rounds of 25 s
  scripts/dashboard_cpu.py --rev b00e40a --rounds 3
  scripts/dashboard_cpu.py --start-step 12000  # late in a long run (lines thinned past 5000)
  scripts/dashboard_cpu.py --parts               # also Chromium on a blank page, the page
                                                 # taking rows in, drawing nothing after its first
                                                 # render, and a bare page with and without a
                                                 # request a second

Run as root, Chromium runs as `nobody` (as root it raises its own threads' priority). Needs
chromium and libjs-chart.js (scripts/setup.sh). Run on a quiet machine."""
import argparse, contextlib, http.server, os, pwd, shutil, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests/deploy"))
import dashboard_live_fake as fake  # noqa: E402


def job_rows(rows, step_ms, stop, start_step=0):
    """Appends the main job's rows to `rows` in real time until stop is set; the rows of the
    first start_step steps are there at once (a page opened late in a long run)."""
    t0, s = time.monotonic() - start_step * step_ms / 1000, 0
    while not stop.is_set():
        due = int((time.monotonic() - t0) * 1000 / step_ms)
        while s < due:
            for r in (0, 1):
                # Phases that vary from step to step, as a real job's do: the means of the last
                # 50 steps (the phases chart) change every refresh.
                j = ((s * 7919 + r * 104729) % 13) / 13
                rows.append({"rank": r, "step": s, "loss": 2.0 / (1 + s / 300) + 0.01 * r,
                             "bytes_up": 2300 + s % 7, "bytes_down": 2400 + s % 5,
                             "compute_ms": 6.1 + 2 * j, "encode_ms": 1.2, "decode_ms": 0.9,
                             "network_ms": 1.5 + j, "wait_ms": 1.1 * (1 - j), "server_ms": 0.8,
                             "exposed_comm_ms": 2.5, "step_ms": step_ms + (s % 3) * 0.1})
            if s % 469 == 468:
                rows += [{"rank": r, "epoch": s // 469, "step": s + 1, "train_acc": 0.7,
                          "test_acc": 0.75 + s / 1e5} for r in (0, 1)]
            s += 1
        time.sleep(0.01)


def cpu_by_type(profile):
    """Clock ticks used so far by each Chromium process type of this profile."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            # Chromium's children rewrite their command line as one string with spaces.
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            cmd = cmd.replace("\0", " ").split()
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if not any(profile in a for a in cmd):
            continue
        kind = next((a[7:] for a in cmd if a.startswith("--type=")), "browser")
        sub = next((a.split("=")[1].split(".")[0] for a in cmd if a.startswith("--utility-sub-type=")), "")
        kind = f"{kind}:{sub}" if sub else kind
        out[kind] = out.get(kind, 0) + int(stat[11]) + int(stat[12])  # utime + stime
    return out


# --parts: the page drawing nothing after its first render, still reading and taking the rows in.
POLL_ONLY = """<script>
'use strict';
(() => { const whole = render; render = (errors) => { if (!st.renders) whole(errors); }; })();
</script>
</body>"""


# --parts: what a request a second costs Chromium by itself: a page of one line of text that
# fetches an empty rows answer every second ("fetch"), and the same page without ("bare").
FETCH_PAGE = """<!doctype html><html><body><p>-</p><script>
(async function ask() {
  await (await fetch('api/rows?since=1000000000&workers=1', {cache: 'no-store'})).json();
  setTimeout(ask, 1000);
})();
</script></body></html>"""
BARE_PAGE = "<!doctype html><html><body><p>-</p></body></html>"


@contextlib.contextmanager
def open_page(source_dir, args, kind="page", flags=lambda profile: ()):
    """Chromium showing the page (kind: "page"; "poll" (POLL_ONLY); "fetch" / "bare" (FETCH_PAGE,
    BARE_PAGE); "blank": about:blank, the fake serving on) against the fake job, with the
    flags flags(profile directory) returns added; yields (the profile directory, the rows
    served so far)."""
    page, chartjs = fake.served_page(source_dir)
    if kind in ("fetch", "bare"):
        page = FETCH_PAGE if kind == "fetch" else BARE_PAGE
    if kind == "poll":
        if page.count("</body>") != 1:
            sys.exit("dashboard_cpu.py: --parts: the page has no single </body> to add a script before")
        page = page.replace("</body>", POLL_ONLY)
    rows, stop = [], threading.Event()
    handler = fake.make_handler(page, chartjs, {"polls": 0, "workers_fail": False}, rows=rows,
                                page_rows=20000, dropped=0, token=None, stream=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Thread(target=job_rows, args=(rows, args.step_ms, stop, args.start_step),
                     daemon=True).start()
    profile = tempfile.mkdtemp(prefix="gp_dash_cpu.")
    cmd = [args.chromium, "--headless", "--no-sandbox", "--disable-gpu",
           "--user-data-dir=" + profile, "--window-size=1400,1900", *flags(profile),
           "about:blank" if kind == "blank" else f"http://127.0.0.1:{server.server_port}/?refresh=1"]
    env = dict(os.environ)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(profile, nobody.pw_uid, nobody.pw_gid)
        cmd = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"] + cmd
        env["HOME"] = profile
    browser = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield profile, rows
    finally:
        browser.kill()
        browser.wait()
        stop.set()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)


def measure(source_dir, args, kind="page"):
    """The CPU of each Chromium process type showing the page (open_page's kind), % of a core."""
    with open_page(source_dir, args, kind) as (profile, rows):
        time.sleep(args.skip)
        c0, t0 = cpu_by_type(profile), time.monotonic()
        time.sleep(args.seconds - args.skip)
        c1, t1 = cpu_by_type(profile), time.monotonic()
    hz = os.sysconf("SC_CLK_TCK")
    return {k: 100.0 * (c1[k] - c0.get(k, 0)) / hz / (t1 - t0) for k in c1}, len(rows)


def page_of(rev, into):
    """server/dashboard/ of a git revision, in a source-dir layout under `into`."""
    d = os.path.join(into, rev, "server/dashboard")
    os.makedirs(d)
    for f in ("index.html", "append.js"):
        with open(os.path.join(d, f), "wb") as out:
            out.write(subprocess.run(["git", "-C", ROOT, "show", f"{rev}:server/dashboard/{f}"],
                                     check=True, capture_output=True).stdout)
    return os.path.join(into, rev)


def page_args(ap, verb):
    """Adds the arguments the page scripts share (their --rev help: "also <verb> ..."), parses
    and checks them; args.chromium is the browser."""
    ap.add_argument("--seconds", type=float, default=25, help="each page open this long")
    ap.add_argument("--skip", type=float, default=10, help="not counting its first seconds")
    ap.add_argument("--step-ms", type=float, default=11.4, help="the fake job's step time")
    ap.add_argument("--start-step", type=int, default=0,
                    help="the fake job has run this many steps when the page opens")
    ap.add_argument("--rev", action="append", default=[], help=f"also {verb} this revision's page")
    args = ap.parse_args()
    me = os.path.basename(sys.argv[0])
    args.chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not args.chromium:
        sys.exit(f"{me}: chromium not found (apt-get install chromium)")
    if args.seconds <= args.skip:
        sys.exit(f"{me}: --seconds must exceed --skip")
    return args


@contextlib.contextmanager
def revision_pages(revs):
    """Yields [(rev, source dir)] of each revision's page (page_of), removed afterwards."""
    tmp = tempfile.mkdtemp(prefix="gp_dash_pages.")
    os.chmod(tmp, 0o755)
    try:
        yield [(rev, page_of(rev, tmp)) for rev in revs]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", action="store_true",
                    help="also measure Chromium on a blank page, the tree's page taking rows only, "
                    "and a bare page with and without a request a second")
    args = page_args(ap, "measure")
    with revision_pages(args.rev) as revs:
        pages = [("tree", ROOT, "page")] + [(rev, src, "page") for rev, src in revs]
        if args.parts:
            pages += [("tree-take", ROOT, "poll"), ("fetch", ROOT, "fetch"), ("bare", ROOT, "bare"),
                      ("blank", ROOT, "blank")]
        print(f"dashboard_cpu: {args.rounds} rounds, each page {args.seconds:g} s at a "
              f"{args.step_ms:g} ms step from step {args.start_step}, counted from {args.skip:g} s; "
              "% of one core")
        totals = {name: [] for name, _, _ in pages}
        for i in range(args.rounds):
            for k in range(len(pages)):
                name, src, kind = pages[(k + i) % len(pages)]
                cpu, n = measure(src, args, kind)
                totals[name].append(sum(cpu.values()))
                parts = "  ".join(f"{t} {v:.2f}" for t, v in sorted(cpu.items()) if v >= 0.005)
                print(f"round {i + 1} {name:>10}: total {sum(cpu.values()):5.2f}  ({parts}; "
                      f"{n} rows served)", flush=True)
        for name, v in totals.items():
            print(f"{name:>10}: mean {sum(v) / len(v):.2f}% of a core "
                  f"(min {min(v):.2f}, max {max(v):.2f}, {len(v)} rounds)")


if __name__ == "__main__":
    main()
