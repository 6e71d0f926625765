#!/usr/bin/env python3
"""The live dashboard end to end (issue 16): a real gradpress-server with server.metrics_port and
a bearer token, two real gradpress-workers training LeNet on a Fashion-MNIST subset (method 5),
then Debian's headless Chromium loads the page from the server while it still holds the job.

  dashboard_e2e_test.py BUILD_DIR [OUT_DIR]    # OUT_DIR (or $OUT): where dashboard.png goes

Checks: the HTTP answers (401 without the token or with a wrong one, 400 for a bad `since`,
404, 405), every field of /api/workers and of each row kind of /api/rows, that the server's
rows are the workers' metrics.jsonl rows (same steps, same losses), and, from the DOM that
Chromium rendered, that the charts hold as many points as the steps the workers reported
(loss against step: one point per (rank, step); accuracy: one per evaluation; phases: workers
x 5) and the worker table lists both workers. Saves a screenshot. Exit 0, or 1 naming the
failed check."""
import json, os, re, shutil, socket, subprocess, sys, tempfile, time, urllib.error, urllib.request

build = os.path.abspath(sys.argv[1])
out_dir = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("OUT", "")
repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
work = tempfile.mkdtemp(prefix="gp_dash_e2e_")
procs = []
failed = []


def fail(what):
    failed.append(what)
    print("FAIL:", what, file=sys.stderr)


def done(code):
    for p in procs:
        if p.poll() is None:
            p.kill()
    if code == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"dashboard_e2e_test: logs kept in {work}", file=sys.stderr)
    sys.exit(code)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(path, token=None, method="GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{http_port}{path}", method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    fail("chromium not found (apt-get install chromium)")
    done(1)

token = "t0k3n-" + os.urandom(6).hex()
with open(f"{work}/token", "w") as f:
    f.write(token + "\n")
http_port = free_port()
steps_per_epoch, epochs = 16, 3  # 2048 images, 2 workers, batch 64
sets = ["--set", "dataset.subset=2048", "--set", "dataset.test_subset=500",
        "--set", f"train.epochs={epochs}", "--set", "train.batch_size=64", "--set", "device=cpu",
        "--set", "train.log_every=0", "--set", "train.checkpoint_every=0",
        "--set", f"security.token_file={work}/token",
        "--set", "security.allow_plaintext_token=true"]
config = f"{repo}/configs/lenet_fmnist_m5.yaml"
server_out = open(f"{work}/server.out", "w")
server = subprocess.Popen(
    [f"{build}/server/gradpress-server", "--config", config, *sets, "--listen", "127.0.0.1:0",
     "--workers", "2", "--set", f"server.metrics_port={http_port}"],
    stdout=server_out, stderr=subprocess.STDOUT)
procs.append(server)
grpc_port = None
for _ in range(300):
    m = re.search(r"listening on port (\d+)", open(f"{work}/server.out").read())
    if m:
        grpc_port = m.group(1)
        break
    if server.poll() is not None:
        break
    time.sleep(0.1)
if not grpc_port:
    fail("the server did not start: " + open(f"{work}/server.out").read()[-2000:])
    done(1)
if f"dashboard: http://127.0.0.1:{http_port}/?token=" not in open(f"{work}/server.out").read():
    fail("the server did not log its dashboard URL on 127.0.0.1")

workers = []
for r in (0, 1):
    workers.append(subprocess.Popen(
        [f"{build}/worker/gradpress-worker", "--config", config, *sets, "--rank", str(r),
         "--workers", "2", "--server", f"127.0.0.1:{grpc_port}", "--run-dir", work],
        stdout=open(f"{work}/worker-{r}.out", "w"), stderr=subprocess.STDOUT,
        env={**os.environ, "GRADPRESS_TOKEN": token}))
    procs.append(workers[-1])
for r, w in enumerate(workers):
    if w.wait(timeout=600) != 0:
        fail(f"worker-{r} exited {w.returncode}: " + open(f"{work}/worker-{r}.out").read()[-2000:])
        done(1)

# --- HTTP answers ---
for path, tok, method, want in (("/", None, "GET", 401), ("/api/rows", "wrong", "GET", 401),
                                ("/api/workers", None, "GET", 401), ("/api/rows?since=x", token, "GET", 400),
                                ("/api/rows?limit=0", token, "GET", 400), ("/nope", token, "GET", 404),
                                ("/", token, "POST", 405), ("/", token, "GET", 200),
                                ("/chart.js", None, "GET", 200), ("/metrics", None, "GET", 200)):
    status, _ = get(path, tok, method)
    if status != want:
        fail(f"{method} {path} (token {'yes' if tok == token else tok}): HTTP {status}, expected {want}")

# --- JSON endpoints, every field ---
status, body = get("/api/workers", token)
info = json.loads(body)
for key, kind in (("job", str), ("shard", int), ("shards", int), ("server_step", int),
                  ("bytes_in", int), ("bytes_out", int), ("live_workers", int), ("workers", list)):
    if not isinstance(info.get(key), kind):
        fail(f"api/workers: field {key} missing or not {kind.__name__}: {info.get(key)!r}")
if info.get("job") != "lenet-fmnist-m5" or info.get("server_step") != steps_per_epoch * epochs:
    fail(f"api/workers: job {info.get('job')!r}, server_step {info.get('server_step')}")
names = sorted(w.get("name") for w in info.get("workers", []))
if names != ["worker-0", "worker-1"]:
    fail(f"api/workers: workers {names}")
for w in info.get("workers", []):
    for key, kind in (("name", str), ("rank", int), ("state", str), ("incarnation", int),
                      ("last_seen_s", (int, float)), ("rejoins", int)):
        if not isinstance(w.get(key), kind):
            fail(f"api/workers: {w.get('name')}: field {key} is {w.get(key)!r}")
# What the page polls: the rows with api/workers' answer as "workers" (last_seen_s moves on).
status, body = get("/api/rows?since=0&limit=1&workers=1", token)
both = json.loads(body).get("workers") if status == 200 else None
if not isinstance(both, dict) or {k: v for k, v in both.items() if k != "workers"} != \
        {k: v for k, v in info.items() if k != "workers"} or \
        sorted(w.get("name") for w in both.get("workers", [])) != names:
    fail(f"api/rows?workers=1: HTTP {status}, workers {both!r}, expected api/workers' answer")

rows, since = [], 0
while True:
    status, body = get(f"/api/rows?since={since}&limit=50", token)
    page = json.loads(body)
    missing = [key for key in ("next", "dropped", "end", "rows") if key not in page]
    if missing:
        fail(f"api/rows: no field {', '.join(missing)}")
        break
    if not since <= page["next"] <= page["end"] or \
            (page["next"] < page["end"] and len(page["rows"]) != 50):
        fail(f"api/rows?since={since}&limit=50: next {page['next']}, end {page['end']} with "
             f"{len(page['rows'])} rows (more waiting: a full page)")
    rows += page["rows"]
    if page["next"] == since:
        break
    since = page["next"]
# What the page reads once caught up: api/stream, the same answers a line each on one
# connection, back to back while behind, then one every `every` seconds.
req = urllib.request.Request(f"http://127.0.0.1:{http_port}/api/stream?since=0&workers=1&every=0.2")
req.add_header("Authorization", "Bearer " + token)
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        ctype = r.headers.get("Content-Type")
        lines, at = [], []
        while not lines or lines[-1]["next"] < lines[-1]["end"] or len(lines) < 3:
            lines.append(json.loads(r.readline()))
            at.append(time.monotonic())
    streamed = [row for line in lines for row in line["rows"]]
    gap = at[-1] - at[-2]  # two lines after the rows: `every` apart
    if ctype != "application/x-ndjson" or streamed != rows or lines[-1]["next"] != len(rows) or \
            any(not isinstance(line.get("workers"), dict) for line in lines) or not 0.15 < gap < 2:
        fail(f"api/stream: {ctype}, {len(lines)} lines holding {len(streamed)} rows (api/rows: "
             f"{len(rows)}), the last two {gap:.2f} s apart: expected the same rows, each line "
             "with workers, then lines 0.2 s apart")
except (OSError, ValueError, KeyError) as e:
    fail(f"api/stream: {e}")

step_fields = ("rank", "step", "loss", "bytes_up", "bytes_down", "compute_ms", "encode_ms",
               "decode_ms", "network_ms", "wait_ms", "server_ms", "exposed_comm_ms", "step_ms")
epoch_fields = ("rank", "epoch", "step", "train_acc", "test_acc")
steps = [r for r in rows if "loss" in r]
evals = [r for r in rows if "test_acc" in r]
for r in steps:
    missing = [k for k in step_fields if not isinstance(r.get(k), (int, float))]
    if missing:
        fail(f"api/rows: step row {r} lacks {missing}")
        break
for r in evals:
    missing = [k for k in epoch_fields if not isinstance(r.get(k), (int, float))]
    if missing:
        fail(f"api/rows: epoch row {r} lacks {missing}")
        break
want_steps = 2 * steps_per_epoch * epochs
if len({(r["rank"], r["step"]) for r in steps}) != want_steps:
    fail(f"api/rows: {len(steps)} step rows, expected {want_steps}")
if len(evals) != 2 * epochs:
    fail(f"api/rows: {len(evals)} evaluation rows, expected {2 * epochs}")
# The server's rows are the workers' own metrics.jsonl rows.
local = {}
for line in open(f"{work}/metrics.jsonl"):
    r = json.loads(line)
    if "loss" in r:
        local[(r["rank"], r["step"])] = r["loss"]
served = {(r["rank"], r["step"]): r["loss"] for r in steps}
if served.keys() != local.keys() or any(abs(served[k] - local[k]) > 1e-6 for k in local):
    fail("api/rows: the served step rows differ from the workers' metrics.jsonl")

# --- the page in a real browser ---
url = f"http://127.0.0.1:{http_port}/?token={token}&refresh=1"
chrome = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={work}/profile",
          "--virtual-time-budget=8000"]
dom = subprocess.run(chrome + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
open(f"{work}/dom.html", "w").write(dom)


def attr(element_id, name):
    m = re.search(r'<[^>]*id="%s"[^>]*>' % element_id, dom)
    if not m:
        return None
    a = re.search(r'%s="([^"]*)"' % name, m.group(0))
    return a.group(1) if a else None


expect = {("gp-status", "data-mode"): "live", ("gp-status", "data-steps"): str(want_steps),
          ("chart-loss-step", "data-points"): str(want_steps),
          ("chart-steptime", "data-points"): str(want_steps),
          ("chart-acc-step", "data-points"): str(2 * epochs),
          ("chart-phases", "data-points"): str(2 * 5)}
for (element, name), want in expect.items():
    got = attr(element, name)
    if got != want:
        fail(f"rendered page: #{element} {name}={got!r}, expected {want!r}")
for w in ("worker-0", "worker-1"):
    if f'data-worker="{w}"' not in dom:
        fail(f"rendered page: the worker table has no row for {w}")

shot_dir = out_dir or work
os.makedirs(shot_dir, exist_ok=True)
shot = os.path.join(shot_dir, "dashboard.png")
subprocess.run(chrome + ["--window-size=1400,1900", f"--screenshot={shot}", url],
               capture_output=True, timeout=120)
if not os.path.exists(shot) or os.path.getsize(shot) < 40000:
    fail(f"no screenshot (or a blank one) at {shot}")

server.terminate()
server.wait(timeout=30)
if failed:
    done(1)
print(f"dashboard_e2e_test: ok ({want_steps} steps, {len(rows)} rows served; screenshot {shot})")
done(0)
