"""Shared by the gradpress.torch tests: a small user-defined model, deterministic batches, the
one-process reference, and a gradpress-server started for a test (with deadlines)."""
import os
import pathlib
import subprocess
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("GP_BUILD_DIR", ROOT / "build"))
SERVER = BUILD / "server" / "gradpress-server"
WORKER_SCRIPT = pathlib.Path(__file__).with_name("worker_process.py")
BATCH = 8


class SmallNet(torch.nn.Module):
    """A user's own model: conv, pooling, two linear layers; `unused` gets no gradient."""

    def __init__(self, with_unused=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = torch.nn.Linear(4 * 4 * 4, 32)
        self.fc2 = torch.nn.Linear(32, 10)
        self.unused = torch.nn.Linear(3, 3) if with_unused else None

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def make_model(with_unused=False):
    torch.manual_seed(7)  # the winner's init is broadcast anyway; this keeps the reference equal
    return SmallNet(with_unused)


def batch(rank, step):
    """Worker `rank`'s batch of step `step`: images [BATCH, 1, 8, 8], labels [BATCH]."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, 1, 8, 8, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def reference_weights(steps, workers, lr, momentum):
    """One process training on every worker's batch of each step (their mean loss)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for step in range(steps):
        xs, ys = zip(*(batch(r, step) for r in range(workers)))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_weights_match(results, expected):
    """Every worker's saved weights (train_pair's results) equal `expected` to float tolerance."""
    assert sorted(results[0]["weights"]) == sorted(expected)
    for name, want in expected.items():
        for r, res in enumerate(results):
            torch.testing.assert_close(res["weights"][name], want, rtol=1e-5, atol=1e-6,
                                       msg=f"rank {r} {name}")


def job_yaml(push="{codec: none}", pull="{codec: none}", workers=2, overlap=True, bucket_mb=4.0,
             lr=0.1, momentum=0.9, min_numel=1024, exchange="gradients", mode="sync", every=1,
             sync_extra=""):
    return (f"name: pytest\ncluster: {{workers: {workers}}}\n"
            f"train: {{lr: {lr}, momentum: {momentum}}}\n"
            f"sync: {{mode: {mode}, exchange: {exchange}, every: {every}, "
            f"overlap: {str(overlap).lower()}, bucket_mb: {bucket_mb}{sync_extra}}}\n"
            f"push: {push}\npull: {pull}\ncompress: {{min_numel: {min_numel}}}\n"
            "server: {worker_timeout_s: 30, deadline_s: 60}\n")


class Server:
    """gradpress-server on 127.0.0.1:<free port> with `config`; stop() ends it."""

    def __init__(self, directory, config, workers=2, deadline_s=30, shard=None, shards=None):
        directory = pathlib.Path(directory)
        name = "server" if shard is None else f"server-{shard}"
        port_file = directory / f"{name}.port"
        self.log_path = directory / f"{name}.log"
        self._log = open(self.log_path, "w")
        sharding = [] if shard is None else ["--shard", str(shard), "--shards", str(shards)]
        self.proc = subprocess.Popen(
            [str(SERVER), "--config", str(config), "--listen", "127.0.0.1:0", "--port-file",
             str(port_file), "--workers", str(workers), "--log-level", "warn"] + sharding,
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + deadline_s
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"gradpress-server exited: {self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"gradpress-server did not listen in {deadline_s} s")
            time.sleep(0.02)
        self.address = f"127.0.0.1:{port_file.read_text().strip()}"

    def log(self):
        self._log.flush()
        return self.log_path.read_text()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def start_worker(args, env=None):
    """One worker_process.py, started (stdout and stderr together, as text)."""
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen([sys.executable, str(WORKER_SCRIPT)] + args, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_workers(args_per_rank, env_per_rank=None, timeout_s=180):
    """Starts one worker_process.py per rank at once; returns their (returncode, output)."""
    envs = env_per_rank or [{}] * len(args_per_rank)
    procs = [start_worker(args, envs[r]) for r, args in enumerate(args_per_rank)]
    deadline = time.monotonic() + timeout_s
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, text))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def train_pair(tmp_path, yaml_text, steps, extra=(), env=None, run_dir=False, shards=None):
    """Two worker_process.py workers against a server started from `yaml_text` (or `shards`
    server shards); identity from arguments, or from the environment when `env` is given.
    Returns each rank's saved results (torch.load of its --out)."""
    config = tmp_path / "job.yaml"
    config.write_text(yaml_text)
    servers = [Server(tmp_path, config)] if shards is None else [
        Server(tmp_path, config, shard=s, shards=shards) for s in range(shards)]
    address = ",".join(s.address for s in servers)
    try:
        args = []
        for r in range(2):
            a = ["--config", str(config), "--steps", str(steps), "--out",
                 str(tmp_path / f"w{r}.pt")] + list(extra)
            if env is None:
                a += ["--rank", str(r), "--world-size", "2", "--server", address]
            if run_dir:
                a += ["--run-dir", str(tmp_path / "run")]
            args.append(a)
        envs = None
        if env is not None:
            ident = dict(WORLD_SIZE="2", GRADPRESS_SERVER=servers[0].address)
            if shards is not None:
                ident["GRADPRESS_SERVERS"] = address
            envs = [dict(env, RANK=str(r), **ident) for r in range(2)]
        results = run_workers(args, envs)
        for rc, text in results:
            logs = "\n".join(s.log() for s in servers)
            assert rc == 0, f"worker failed:\n{text}\nserver log:\n{logs}"
    finally:
        for s in servers:
            s.stop()
    return [torch.load(tmp_path / f"w{r}.pt") for r in range(2)]
