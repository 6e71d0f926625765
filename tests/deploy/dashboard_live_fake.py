#!/usr/bin/env python3
"""The dashboard's live mode against a fake of the server's HTTP side (python3's http.server on
127.0.0.1): / serves server/dashboard/index.html with its markers replaced as the real server
does, /chart.js Debian's Chart.js, api/rows?since=N pages of a fixture (out of order, a re-run
step, a codec change, a rejoin; the first rows "no longer held"; with workers=1, api/workers'
answer too), api/workers a fixed answer.
Every request needs "Authorization: Bearer secret".

  dashboard_live_fake.py SOURCE_DIR            # the test: three headless Chromium loads
  dashboard_live_fake.py SOURCE_DIR --serve 8080  # serve it; open /?token=secret&refresh=1

Checks, from the dumped DOM: with the token, every row arrives through several polls, asked
back to back (answers carry "end") and first drawn when all came, and the
charts' data-points and the worker table match the fixture, with one request a refresh (no
api/workers); when api/rows leaves the workers out and api/workers answers 503 the
status line names it and the rows are still all shown; without the token the 401 is shown.
Exit 0 on success, 1 naming the failed check (chromium or Chart.js missing included)."""
import http.server, json, os, re, shutil, subprocess, sys, tempfile, threading, time, urllib.parse

CHARTJS = os.environ.get("GP_CHARTJS", "/usr/share/javascript/chart.js/chart.min.js")
TOKEN, PAGE, DROPPED = "secret", 9, 2


def fixture():
    rows = [{"rank": 0, "note": "gone"}, {"rank": 1, "note": "gone"}]  # before `dropped`
    rows += [{"rank": r, "epoch": 0, "step": 0, "push_density": 0.5} for r in (0, 1)]
    for s in range(30):
        for r in (1, 0) if s % 2 else (0, 1):
            loss = 9.9 if (r == 1 and 20 <= s < 23) else 2.0 / (1 + s / 10) + 0.05 * r
            rows.append({"rank": r, "step": s, "loss": loss, "bytes_up": 500, "bytes_down": 1500,
                         "compute_ms": 10, "encode_ms": 1, "decode_ms": 1, "network_ms": 3,
                         "wait_ms": 2, "server_ms": 2, "exposed_comm_ms": 4, "step_ms": 17,
                         "overlap": True})
        if s == 22:
            rows.append({"event": "silent", "worker": "worker-1", "step": 22})
            rows.append({"rank": 1, "step": 20, "event": "rejoin", "steps_lost": 3, "shards": "1"})
        if s in (9, 19, 29):
            rows += [{"rank": r, "epoch": s // 10, "step": s + 1, "bytes_total": 1e4 * s,
                      "train_acc": 0.5 + s / 100, "test_acc": 0.4 + s / 100 + r / 50,
                      "epoch_s": 2.0} for r in (0, 1)]
        if s == 15:
            rows += [{"rank": r, "epoch": 1, "step": 15, "push_codec": "qsgd levels=16", "rung": 2,
                      "reason": "plateau"} for r in (0, 1)]
    # Rank 1 re-runs 20..22 after its rejoin: the latest rows win.
    rows += [{**rows[i], "loss": 0.7} for i, r in enumerate(rows)
             if r.get("rank") == 1 and "loss" in r and 20 <= r["step"] < 23]
    return rows


ROWS = fixture()
WORKERS = {"job": "live-job", "shard": 0, "shards": 1, "server_step": 123, "bytes_in": 4.5e6,
           "bytes_out": 9e6, "workers": [
               {"name": f"worker-{rank}", "rank": rank, "state": state, "incarnation": inc,
                "last_seen_s": seen, "rejoins": inc - 1}
               for rank, state, inc, seen in ((0, "live", 1, 0.2), (1, "register_again", 2, 3.1),
                                              (2, "dropped", 1, 60.0))]}


def make_handler(page, chartjs, state, rows=None, page_rows=PAGE, dropped=DROPPED, token=TOKEN,
                 send_end=True, stream=False):
    """The fake server's handler; rows (default: the fixture) are served page_rows at a time, the
    first `dropped` as no longer held; token None: no Authorization needed. send_end: answers
    say where the rows end, as the server's do (a page behind asks again at once); without it
    every answer looks caught up, as a live job's rows arriving page_rows a poll would.
    stream: api/stream as the server serves it (else 404, a server without it), its lines
    counted in state["stream_lines"] (and the streams in state["streams"]); state["on_line"](n),
    if set, runs before line n; state["stream_status"], if set, refuses each stream with it."""
    rows = ROWS if rows is None else rows

    def answer(since, query):
        since = max(since, dropped)
        part = rows[since:since + page_rows]
        out = {"next": since + len(part), "rows": part, "dropped": dropped}
        if send_end:
            out["end"] = len(rows)
        # workers=1: api/workers' answer too, as the server gives it; a failing one is left
        # out, as a server without it would, and asked apart (503).
        if "workers=1" in query and not state["workers_fail"]:
            out["workers"] = WORKERS
        return out

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, code, body, ctype="application/json"):
            body = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def stream(self, since, every, query):
            """Lines until the client goes: one at once, then one every `every` s (at once
            while behind), as the server's api/stream; state["lines_per_stream"]: then it
            ends the answer."""
            state["streams"] = state.get("streams", 0) + 1
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            try:
                for _ in range(state.get("lines_per_stream", 1 << 30)):
                    n = state.get("stream_lines", 0)
                    if state.get("on_line"):
                        state["on_line"](n)
                    a = answer(since, query)
                    self.wfile.write((json.dumps(a) + "\n").encode())
                    self.wfile.flush()
                    state["stream_lines"] = n + 1
                    since = a["next"]
                    if not (send_end and a["next"] < a["end"]):
                        time.sleep(every)
            except OSError:
                return

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                return self.send(200, page, "text/html; charset=utf-8")
            if url.path == "/chart.js":
                return self.send(200, chartjs, "text/javascript")
            if url.path == "/hold":  # a test's image: the page's load waits for it
                lines = int(urllib.parse.parse_qs(url.query).get("lines", ["0"])[0])
                deadline = time.monotonic() + 20
                while state.get("stream_lines", 0) < lines and time.monotonic() < deadline:
                    time.sleep(0.05)
                return self.send(200, "{}")
            if token is not None and self.headers.get("Authorization") != "Bearer " + token:
                return self.send(401, "missing or wrong bearer token", "text/plain")
            query = urllib.parse.parse_qs(url.query)
            if url.path == "/api/rows":
                state["polls"] += 1
                since = int(query.get("since", ["0"])[0])
                return self.send(200, json.dumps(answer(since, url.query)))
            if url.path == "/api/stream" and stream and state.get("stream_status"):
                state["streams"] = state.get("streams", 0) + 1  # refused: all streams taken
                return self.send(state["stream_status"], "too many open streams", "text/plain")
            if url.path == "/api/stream" and stream:
                return self.stream(int(query.get("since", ["0"])[0]),
                                   float(query.get("every", ["1"])[0]), url.query)
            if url.path == "/api/workers":
                state["workers_asked"] = state.get("workers_asked", 0) + 1
                if state["workers_fail"]:
                    return self.send(503, "store is restoring", "text/plain")
                return self.send(200, json.dumps(WORKERS))
            self.send(404, "not found", "text/plain")
    return Handler


def fail(msg):
    print("dashboard_live_fake: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def served_page(source_dir):
    """index.html as the server serves it, and Chart.js's bytes."""
    template = open(os.path.join(source_dir, "server/dashboard/index.html")).read()
    append_js = open(os.path.join(source_dir, "server/dashboard/append.js")).read()
    page = template.replace("<!-- GP:CHARTJS -->\n", '<script src="chart.js"></script>\n', 1)
    page = page.replace("<!-- GP:APPENDJS -->\n", f"<script>\n{append_js}</script>\n", 1)
    page = page.replace("<!-- GP:DATA -->\n", "", 1)
    if not os.path.isfile(CHARTJS):
        fail(f"Chart.js not found at {CHARTJS} (apt-get install libjs-chart.js)")
    return page, open(CHARTJS, "rb").read()


def chromium_dom(url, budget_ms=5000):
    """The DOM of url in headless Chromium after budget_ms of virtual time (None: in real time,
    once the page has loaded)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        fail("chromium not found (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                              "--user-data-dir=" + profile, "--dump-dom", url] +
                             ([f"--virtual-time-budget={budget_ms}"] if budget_ms else []),
                             capture_output=True, text=True, timeout=90)
    if out.returncode != 0 or not out.stdout:
        fail(f"chromium failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def checked_page(source_dir, rows, check, page_rows, budget_ms):
    """The live page with the script `check` added, against the fake serving `rows` page_rows a
    poll (no token, each answer looking caught up: a page drawn every poll, as a live job's
    rows arrive), at refresh=0.2 in headless Chromium for budget_ms of virtual time: (the DOM,
    the fake's state, the <div id="gp-check"> tag the check wrote, or None)."""
    page, chartjs = served_page(source_dir)
    page = page.replace("</body>", check + "</body>", 1)
    state = {"polls": 0, "workers_fail": False}
    handler = make_handler(page, chartjs, state, rows=rows, page_rows=page_rows, dropped=0,
                           token=None, send_end=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dom = chromium_dom(f"http://127.0.0.1:{server.server_port}/?refresh=0.2", budget_ms)
    server.shutdown()
    tag = re.search(r'<div id="gp-check"[^>]*>', dom)
    return dom, state, tag and tag.group(0)


def main():
    if len(sys.argv) < 2:
        fail("usage: dashboard_live_fake.py SOURCE_DIR [--serve PORT]")
    page, chartjs = served_page(sys.argv[1])
    state = {"polls": 0, "workers_fail": False}
    handler = make_handler(page, chartjs, state)
    serve = "--serve" in sys.argv
    port = int(sys.argv[sys.argv.index("--serve") + 1]) if serve else 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    if serve:
        print(f"http://127.0.0.1:{server.server_port}/?token={TOKEN}&refresh=1")
        server.serve_forever()
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def load(query):
        return chromium_dom(f"http://127.0.0.1:{server.server_port}/{query}")

    def attr(dom, elem, name):
        tag = re.search(r'<[a-z0-9]+ id="%s"[^>]*>' % elem, dom)
        m = tag and re.search(r' %s="([^"]*)"' % name, tag.group(0))
        return m.group(1) if m else None

    def expect(dom, elem, name, want, why):
        got = attr(dom, elem, name)
        if got != str(want):
            fail(f'#{elem} {name}="{got}", expected "{want}" ({why})')

    held = ROWS[DROPPED:]
    steps = {(r["rank"], r["step"]) for r in held if "loss" in r and "epoch" not in r}
    epochs = [r for r in held if "test_acc" in r]
    n_steps = len({s for _, s in steps})

    # 1: the token, every row through several polls, asked at once and drawn once all came.
    dom = load(f"?token={TOKEN}&refresh=0.2")
    if state["polls"] < len(held) // PAGE:
        fail(f"only {state['polls']} polls of api/rows for {len(held)} rows in pages of {PAGE}")
    expect(dom, "gp-status", "data-first-rows", len(held),
           "the first render waits for every row held (answers' next below their end)")
    expect(dom, "gp-status", "data-mode", "live", "no #gp-rows in the served page")
    expect(dom, "gp-status", "data-transport", "poll", "a server without api/stream (404)")
    expect(dom, "gp-status", "data-rows", len(held), "rows the server still holds")
    expect(dom, "gp-status", "data-steps", len(steps), "distinct (rank, step) step rows")
    expect(dom, "gp-status", "data-markers", 3, "density 0.5, qsgd levels=16, w1 rejoin")
    expect(dom, "chart-loss-step", "data-points", len(steps), "a point per step row")
    expect(dom, "chart-loss-bytes", "data-points", len(steps), "a point per step row")
    expect(dom, "chart-steptime", "data-points", len(steps), "a point per step row")
    expect(dom, "chart-bytes", "data-points", 3 * n_steps, "up, down, total per distinct step")
    expect(dom, "chart-acc-step", "data-points", len(epochs), "a point per epoch row")
    expect(dom, "chart-acc-bytes", "data-points", len(epochs), "a point per epoch row")
    expect(dom, "chart-phases", "data-points", 2 * 5, "2 workers with rows x 5 phases")
    if int(attr(dom, "gp-status", "data-renders") or 0) < 3:
        fail("fewer than 3 renders in 5 s at refresh=0.2")
    for name, st in (("worker-0", "live"), ("worker-1", "register_again"), ("worker-2", "dropped")):
        if f'<tr data-worker="{name}" data-state="{st}"' not in dom:
            fail(f"worker table: no {name} in state {st}")
    if '<h1 id="gp-job">live-job</h1>' not in dom or 'id="gp-server-step">123<' not in dom:
        fail("header: job name or server step from api/workers missing")
    if f"{DROPPED} older rows no longer held" not in dom:
        fail("status line does not mention the dropped rows")
    if 'class="error"' in dom:
        fail("status line shows an error with a healthy server")
    if state.get("workers_asked"):
        fail(f"the page asked api/workers {state['workers_asked']} times: api/rows?workers=1 "
             "carries it, one request a refresh")

    # 2: api/workers fails: the status names it, the rows are all still there.
    state["workers_fail"] = True
    dom = load(f"?token={TOKEN}&refresh=0.2")
    expect(dom, "gp-status", "data-steps", len(steps), "rows shown while api/workers fails")
    if not re.search(r'id="gp-status"[^>]*class="error"[^>]*>error: api/workers: HTTP 503', dom):
        fail("status line does not show api/workers' HTTP 503")

    # 3: no token: 401 shown, the page keeps polling.
    dom = load("?refresh=0.2")
    if "api/rows?since=0&amp;workers=1: HTTP 401" not in dom:  # & as the DOM dump writes it
        fail("status line does not show the 401 without a token")
    if int(attr(dom, "gp-status", "data-renders") or 0) < 3:
        fail("the page stopped polling after a 401")

    # 4: a server with api/stream: the page catches up by polls, then reads the stream, which
    # brings the rows added after the first render; the fake ends each stream after 5 lines,
    # and the page polls once and opens another. In real time (Chromium's virtual time holds
    # back the stream's request): the page also shows an image from /hold, answered once 8
    # lines were sent, and Chromium dumps the DOM once the page has loaded.
    later = 8
    rows = list(ROWS[:-later])
    state4 = {"polls": 0, "workers_fail": False, "lines_per_stream": 5}
    state4["on_line"] = lambda n: rows.extend(ROWS[-later:]) if n == 2 else None
    held_page = page.replace("</body>", "<img src='hold?lines=8' alt=''></body>", 1)
    server4 = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(
        held_page, chartjs, state4, rows=rows, stream=True))
    threading.Thread(target=server4.serve_forever, daemon=True).start()
    dom = chromium_dom(f"http://127.0.0.1:{server4.server_port}/?token={TOKEN}&refresh=0.2", None)
    server4.shutdown()
    if state4.get("stream_lines", 0) < 8:
        fail(f"api/stream sent {state4.get('stream_lines', 0)} lines, expected 8 or more")
    expect(dom, "gp-status", "data-transport", "stream", "a server with api/stream")
    expect(dom, "gp-status", "data-first-rows", len(held) - later, "drawn first once caught up")
    expect(dom, "gp-status", "data-rows", len(held), "the rows added later, from the stream")
    expect(dom, "gp-status", "data-steps", len(steps), "distinct (rank, step) step rows")
    expect(dom, "chart-loss-step", "data-points", len(steps), "a point per step row")
    catch_up = -(-(len(held) - later) // PAGE)  # pages of rows, the last opening the stream
    if state4["streams"] < 2 or state4["polls"] != catch_up + state4["streams"] - 1:
        fail(f"{state4['polls']} polls of api/rows and {state4['streams']} streams: expected "
             f"{catch_up} polls to catch up, then one after each stream ended (at 5 lines)")
    if 'class="error"' in dom:
        fail("status line shows an error with a streaming server")

    # 5: a server whose streams are all taken (503): the page polls, shows no error, and asks
    # for a stream again only after a minute (virtual time here: 5 s).
    state5 = {"polls": 0, "workers_fail": False, "stream_status": 503}
    server5 = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(
        page, chartjs, state5, stream=True))
    threading.Thread(target=server5.serve_forever, daemon=True).start()
    dom = chromium_dom(f"http://127.0.0.1:{server5.server_port}/?token={TOKEN}&refresh=0.2")
    server5.shutdown()
    expect(dom, "gp-status", "data-transport", "poll", "every stream refused with 503")
    expect(dom, "gp-status", "data-rows", len(held), "the rows, polled")
    if state5.get("streams") != 1 or int(attr(dom, "gp-status", "data-renders") or 0) < 3:
        fail(f"{state5.get('streams')} streams asked, {attr(dom, 'gp-status', 'data-renders')} "
             "renders: expected one refused stream, then polls every 0.2 s")
    if 'class="error"' in dom:
        fail("status line shows an error when the streams are all taken (the page polls)")
    print(f"dashboard_live_fake: OK ({len(held)} rows, {state['polls']} polls; streamed: "
          f"{state4['polls']} polls, {state4['streams']} streams, {state4['stream_lines']} lines)")


if __name__ == "__main__":
    main()
