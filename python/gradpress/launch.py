"""python3 -m gradpress.launch: a gradpress job on this machine, like torchrun (docs/python.md).

    python3 -m gradpress.launch --workers 2 [--servers 1] [--run-dir DIR] CONFIG train.py ARGS...

Starts S gradpress-server shard(s) from CONFIG, each on a port the OS chooses, then N copies
of ``python train.py ARGS...`` with RANK, WORLD_SIZE, LOCAL_RANK, GRADPRESS_SERVER (and
GRADPRESS_SERVERS for S > 1), GRADPRESS_CONFIG, GRADPRESS_SET and GRADPRESS_RUN_DIR set, so
``gradpress.torch.DistributedOptimizer`` runs the servers' job with no argument. The run
directory gets server-<s>.log, worker-<r>.log (each worker's output is also echoed here,
prefixed with its rank), config.yaml and launch.json (the command and every child's pid).

Ends everything: all workers exit 0 -> the servers are stopped, exit 0. A worker fails -> the
others and the servers are stopped, its rank, exit code and log tail are printed, and launch
exits with its code; a server that exits early is a failure too. SIGINT / SIGTERM -> SIGTERM to
every child's process group, SIGKILL after --grace-s, exit 130 / 143. Bad arguments: one line,
exit 2, nothing started.
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

PROG = "gradpress.launch"
TAIL_LINES = 20


class UsageError(Exception):
    """A bad argument: reported on one line, exit 2, before anything starts."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def _parser():
    ap = _Parser(prog=f"python3 -m {PROG}",
                 description="Start gradpress-server shard(s) and N Python workers on this "
                 "machine; stop them all when one fails or on Ctrl-C.")
    ap.add_argument("--workers", type=int, required=True, help="worker processes to start (N)")
    ap.add_argument("--servers", type=int, default=1, help="gradpress-server shards (default 1)")
    ap.add_argument("--run-dir", help="logs, config.yaml, launch.json "
                    "(default runs/launch/<timestamp>)")
    ap.add_argument("--server-bin", help="gradpress-server (default $GRADPRESS_SERVER_BIN, else "
                    "the build tree's server/gradpress-server, else PATH)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a job config key, for the servers and the workers alike "
                    "(repeatable)")
    ap.add_argument("--push", help="the push codec block, a shorthand "
                    "('topk ratio=0.01 error_feedback=true then=qsgd levels=16') or a YAML "
                    "flow mapping; for servers and workers alike")
    ap.add_argument("--pull", help="the pull codec block, as --push")
    ap.add_argument("--log-level", default="info", help="the servers' log level (default info)")
    ap.add_argument("--grace-s", type=float, default=10.0,
                    help="seconds a child has to exit after SIGTERM before SIGKILL (default 10)")
    ap.add_argument("config", nargs="?", help="the job YAML the servers run")
    ap.add_argument("script", nargs="?", help="the training script every worker runs")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return ap


def find_server_bin(flag):
    """--server-bin, else $GRADPRESS_SERVER_BIN, else the one `pip install .` put beside this
    package (gradpress/bin/), else server/gradpress-server of the build tree this package's _C
    comes from (or <repo>/build from the sources), else PATH."""
    for path, source in ((flag, "--server-bin"),
                         (os.environ.get("GRADPRESS_SERVER_BIN"), "$GRADPRESS_SERVER_BIN")):
        if path:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise UsageError(f"{source}: '{path}' is not an executable file")
            return os.path.abspath(path)
    import gradpress
    candidates = [pathlib.Path(d) / "bin" / "gradpress-server" for d in gradpress.__path__]
    for d in map(pathlib.Path, gradpress.__path__):  # build/python/gradpress, python/gradpress
        candidates += [d.parent.parent / "server" / "gradpress-server",
                       d.parent.parent / "build" / "server" / "gradpress-server"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c.resolve())
    found = shutil.which("gradpress-server")
    if found:
        return found
    raise UsageError("no gradpress-server binary: build it (cmake --build build) or pass "
                     "--server-bin / set $GRADPRESS_SERVER_BIN")


def job_overrides(a):
    """--set, then --push and --pull, as config overrides (one line each)."""
    out = []
    for o in a.overrides:
        if "=" not in o or not o.split("=", 1)[0].strip():
            raise UsageError(f"--set takes KEY=VALUE (like gradpress-server's --set), got '{o}'")
        out.append(o)
    for block in ("push", "pull"):
        spec = getattr(a, block)
        if spec is None:
            continue
        if spec.strip().startswith("{"):
            out.append(f"{block}={spec.strip()}")
            continue
        try:  # the shorthand is parsed by the C++ side (common/codec_spec.h)
            import torch  # noqa: F401  (before gradpress._C)
            from gradpress import _C
            out.append(_C.codec_override(block, spec))
        except ValueError as e:
            raise UsageError(f"--{block}: {e}") from None
        except ImportError as e:
            raise UsageError(f"--{block} '{spec}': a shorthand needs gradpress._C ({e}); "
                             "give a YAML flow mapping instead") from None
    for o in out:
        if "\n" in o:
            raise UsageError(f"an override must be one line: {o!r}")
    return out


def default_run_dir():
    base = pathlib.Path("runs") / "launch" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    d, i = base, 1
    while d.exists():
        d, i = base.with_name(f"{base.name}-{i}"), i + 1
    return d


def parse(argv):
    """The checked arguments; UsageError for anything wrong, before anything starts."""
    a = _parser().parse_args(argv)
    if a.script is None:
        raise UsageError("expected CONFIG and a training script (see --help)")
    if a.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {a.workers}")
    if a.servers < 1:
        raise UsageError(f"--servers must be at least 1, got {a.servers}")
    if not os.path.isfile(a.config):
        raise UsageError(f"config: no such file '{a.config}'")
    if not os.path.isfile(a.script):
        raise UsageError(f"script: no such file '{a.script}'")
    if a.grace_s < 0:
        raise UsageError(f"--grace-s must be at least 0, got {a.grace_s}")
    a.server_bin = find_server_bin(a.server_bin)
    a.job_overrides = job_overrides(a)
    a.run_dir = pathlib.Path(a.run_dir) if a.run_dir else default_run_dir()
    if a.run_dir.exists() and not a.run_dir.is_dir():
        raise UsageError(f"--run-dir: '{a.run_dir}' is not a directory")
    return a


def _tail(path, n=TAIL_LINES):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    return lines[-n:]


def _describe(code):
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _exit_code(code):
    return 128 - code if code < 0 else code


class Child:
    """One process in its own process group (a new session): the terminal's Ctrl-C reaches
    only launch, which stops the children in order."""

    def __init__(self, kind, index, argv, env, log_path, echo=None):
        self.kind, self.index, self.log_path = kind, index, log_path
        self.reader = None
        if echo is None:  # a server: its output goes to its log file
            with open(log_path, "wb") as log:
                self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        else:  # a worker: its log file and the terminal, line by line
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            self.reader = threading.Thread(target=self._copy, args=(echo,), daemon=True)
            self.reader.start()

    @property
    def name(self):
        return f"{self.kind} {self.index}"

    def _copy(self, echo):
        prefix = f"[{self.index}] ".encode()
        with open(self.log_path, "wb") as log:
            for line in iter(self.proc.stdout.readline, b""):
                log.write(line)
                log.flush()
                echo(prefix + (line if line.endswith(b"\n") else line + b"\n"))
        self.proc.stdout.close()

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)  # the child and whatever it started
        except (ProcessLookupError, PermissionError):
            pass

    def finish_output(self, timeout=5.0):
        if self.reader is not None:
            self.reader.join(timeout)


class Launch:
    def __init__(self, a):
        self.a = a
        self.run_dir = a.run_dir
        self.servers, self.workers, self.addresses = [], [], []
        self.stop_signal = None
        self.wake = threading.Event()
        self._echo_lock = threading.Lock()

    # -- output -------------------------------------------------------------------------
    def echo(self, data):
        with self._echo_lock:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

    def say(self, text):
        sys.stdout.flush()
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)

    def write_record(self):
        record = {
            "command": [sys.executable, "-m", PROG] + list(self.a.argv),
            "launch_pid": os.getpid(), "config": os.path.abspath(self.a.config),
            "overrides": self.a.job_overrides, "servers": [
                {"shard": s.index, "pid": s.proc.pid, "address": addr, "log": s.log_path.name}
                for s, addr in zip(self.servers, self.addresses + [None] * len(self.servers))],
            "workers": [{"rank": w.index, "pid": w.proc.pid, "log": w.log_path.name}
                        for w in self.workers]}
        tmp = self.run_dir / "launch.json.tmp"
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, self.run_dir / "launch.json")

    # -- signals ------------------------------------------------------------------------
    def _on_signal(self, signum, frame):
        if self.stop_signal is None:
            self.stop_signal = signum
        else:  # a second Ctrl-C: no more grace
            self.a.grace_s = 0
        self.wake.set()

    # -- starting -----------------------------------------------------------------------
    def start_servers(self):
        a, n = self.a, self.a.servers
        for s in range(n):
            port_file = self.run_dir / f"server-{s}.port"
            if port_file.exists():
                port_file.unlink()
            argv = [a.server_bin, "--config", os.path.abspath(a.config), "--listen",
                    "127.0.0.1:0", "--port-file", str(port_file), "--workers", str(a.workers),
                    "--shard", str(s), "--shards", str(n), "--log-level", a.log_level]
            for o in a.job_overrides:
                argv += ["--set", o]
            self.servers.append(Child("server", s, argv, dict(os.environ),
                                      self.run_dir / f"server-{s}.log"))
            self.write_record()
        deadline = time.monotonic() + 60
        for s, server in enumerate(self.servers):
            port_file = self.run_dir / f"server-{s}.port"
            while not port_file.exists():
                if self.stop_signal is not None:
                    return False
                if server.proc.poll() is not None:
                    self.fail_child(server)
                    return False
                if time.monotonic() > deadline:
                    self.say(f"server {s} did not listen within 60 s; the last lines of "
                             f"{server.log_path}:")
                    self.print_tail(server.log_path)
                    self.code = 1
                    return False
                self.wake.wait(0.02)
            self.addresses.append(f"127.0.0.1:{port_file.read_text().strip()}")
        self.write_record()
        return True

    def worker_env(self, rank):
        a = self.a
        env = dict(os.environ)
        import gradpress  # the workers import this same package
        paths = [str(pathlib.Path(d).resolve().parent) for d in gradpress.__path__]
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
        env.update({
            "RANK": str(rank), "WORLD_SIZE": str(a.workers), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(a.workers), "GRADPRESS_SERVER": self.addresses[0],
            "GRADPRESS_CONFIG": os.path.abspath(a.config),
            "GRADPRESS_RUN_DIR": str(self.run_dir.resolve()), "PYTHONUNBUFFERED": "1"})
        if len(self.addresses) > 1:
            env["GRADPRESS_SERVERS"] = ",".join(self.addresses)
        else:
            env.pop("GRADPRESS_SERVERS", None)
        if a.job_overrides:
            env["GRADPRESS_SET"] = "\n".join(a.job_overrides)
        else:
            env.pop("GRADPRESS_SET", None)
        if "OMP_NUM_THREADS" not in env and a.workers > 1:  # as torchrun does
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // a.workers))
        return env

    def start_workers(self):
        if "OMP_NUM_THREADS" not in os.environ and self.a.workers > 1:
            self.say(f"OMP_NUM_THREADS={max(1, (os.cpu_count() or 1) // self.a.workers)} for "
                     "each worker (set it to choose)")
        for r in range(self.a.workers):
            argv = [sys.executable, self.a.script] + list(self.a.args)
            self.workers.append(Child("worker", r, argv, self.worker_env(r),
                                      self.run_dir / f"worker-{r}.log", echo=self.echo))
        self.write_record()

    # -- ending -------------------------------------------------------------------------
    def print_tail(self, path):
        lines = _tail(path)
        sys.stderr.write("".join(f"  {line}\n" for line in lines) if lines else "  (empty)\n")
        sys.stderr.flush()

    def fail_child(self, child):
        code = child.proc.returncode
        child.finish_output()
        what = "exited early: it" if child.kind == "server" else ""
        self.say(f"{child.name} {what}{' ' if what else ''}{_describe(code)}; the last "
                 f"{TAIL_LINES} lines of {child.log_path}:")
        self.print_tail(child.log_path)
        self.code = _exit_code(code) if code != 0 else 1

    def stop(self, children):
        """SIGTERM to each live child's group, SIGKILL after the grace period; then reaped."""
        live = [c for c in children if c.proc.poll() is None]
        for c in live:
            c.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.a.grace_s
        while any(c.proc.poll() is None for c in live) and time.monotonic() < deadline:
            self.wake.clear()
            self.wake.wait(0.02)
        for c in children:
            c.signal(signal.SIGKILL)  # leftovers, and anything a child started and left
            if c.proc.poll() is None:
                self.say(f"{c.name} did not exit within {self.a.grace_s:g} s of SIGTERM: killed")
            c.proc.wait()
        for c in children:
            c.finish_output()

    def monitor(self):
        """Until every worker exited 0 (0), a child failed (its code) or a signal came."""
        while True:
            if self.stop_signal is not None:
                return
            for s in self.servers:
                if s.proc.poll() is not None:
                    self.fail_child(s)
                    return
            codes = [w.proc.poll() for w in self.workers]
            for w, code in zip(self.workers, codes):
                if code is not None and code != 0:
                    self.fail_child(w)
                    return
            if all(c == 0 for c in codes):
                self.code = 0
                return
            self.wake.clear()
            self.wake.wait(0.05)

    def run(self):
        self.code = 1
        self.run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.a.config, self.run_dir / "config.yaml")
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.say(f"{self.a.servers} server(s), {self.a.workers} worker(s); run directory "
                     f"{self.run_dir}")
            if self.start_servers():
                self.say("servers on " + ", ".join(self.addresses))
                self.start_workers()
                self.monitor()
        finally:
            if self.stop_signal is not None:
                self.say(f"{signal.Signals(self.stop_signal).name}: stopping the workers and "
                         "servers")
                self.code = 128 + self.stop_signal
            self.stop(self.workers)
            self.stop(self.servers)
            for s in range(len(self.servers)):  # the addresses stay in launch.json
                (self.run_dir / f"server-{s}.port").unlink(missing_ok=True)
            for s, old_handler in old.items():
                signal.signal(s, old_handler)
        if self.code == 0:
            self.say(f"all {self.a.workers} worker(s) exited 0; logs in {self.run_dir}")
        return self.code


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = parse(argv)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    a.argv = argv
    return Launch(a).run()


if __name__ == "__main__":
    sys.exit(main())
