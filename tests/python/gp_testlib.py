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


def job_yaml(push="{codec: none}", pull="{codec: none}", workers=2, overlap=True, bucket_mb=4.0,
             lr=0.1, momentum=0.9, min_numel=1024, exchange="gradients"):
    return (f"name: pytest\ncluster: {{workers: {workers}}}\n"
            f"train: {{lr: {lr}, momentum: {momentum}}}\n"
            f"sync: {{mode: sync, exchange: {exchange}, every: 1, overlap: {str(overlap).lower()}, "
            f"bucket_mb: {bucket_mb}}}\n"
            f"push: {push}\npull: {pull}\ncompress: {{min_numel: {min_numel}}}\n"
            "server: {worker_timeout_s: 30, deadline_s: 60}\n")


class Server:
    """gradpress-server on 127.0.0.1:<free port> with `config`; stop() ends it."""

    def __init__(self, directory, config, workers=2, deadline_s=30):
        directory = pathlib.Path(directory)
        port_file = directory / "server.port"
        self.log_path = directory / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(SERVER), "--config", str(config), "--listen", "127.0.0.1:0", "--port-file",
             str(port_file), "--workers", str(workers), "--log-level", "warn"],
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


def run_workers(args_per_rank, env_per_rank=None, timeout_s=180):
    """Starts one worker_process.py per rank at once; returns their (returncode, output)."""
    procs = []
    for r, args in enumerate(args_per_rank):
        env = dict(os.environ)
        env.update((env_per_rank or [{}] * len(args_per_rank))[r])
        procs.append(subprocess.Popen([sys.executable, str(WORKER_SCRIPT)] + args, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
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
