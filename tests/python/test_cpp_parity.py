"""A Python worker and gradpress-worker send the same payloads (issue 31): the same
TorchScript CNN, the job's synthetic data in gradpress-worker's order (gp.worker_data), the
same codecs and seeds, each against its own server. Method 5 with error feedback both ways
makes every step's payload depend on all earlier ones, so equal bytes and equal losses step
after step mean equal payloads."""
import json
import subprocess

import torch

import gp_testlib
import gradpress.torch as gp

M5 = "{codec: topk, ratio: 0.05, then: {codec: qsgd, levels: 16}, error_feedback: true}"


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 5)
        self.fc1 = torch.nn.Linear(4 * 12 * 12, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def job(tmp_path, model_path):
    text = (f"name: parity\nmodel: {{name: torchscript, path: {model_path}}}\n"
            "dataset: {name: synthetic, subset: 256, test_subset: 64}\n"
            "train: {epochs: 1, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 3, threads: 1}\n"
            "cluster: {workers: 1}\n"
            "sync: {mode: sync, exchange: gradients, every: 1, overlap: false}\n"
            f"push: {M5}\npull: {M5}\ncompress: {{min_numel: 100}}\n"
            "server: {worker_timeout_s: 30, deadline_s: 60}\n")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def cpp_run(tmp_path, config):
    d = tmp_path / "cpp"
    d.mkdir()
    server = gp_testlib.Server(d, config, workers=1)
    try:
        r = subprocess.run([str(gp_testlib.BUILD / "worker" / "gradpress-worker"), "--config",
                            str(config), "--rank", "0", "--workers", "1", "--server",
                            server.address, "--run-dir", str(d / "run"), "--log-level", "warn"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\nserver:\n{server.log()}"
    finally:
        server.stop()
    rows = [json.loads(x) for x in (d / "run" / "metrics.jsonl").read_text().splitlines()]
    return [x for x in rows if "bytes_up" in x and "epoch_s" not in x]


def python_run(tmp_path, config, model_path):
    d = tmp_path / "python"
    d.mkdir()
    server = gp_testlib.Server(d, config, workers=1)
    try:
        torch.set_num_threads(1)
        model = torch.jit.load(str(model_path))
        model.train()
        # gradpress-worker names a TorchScript model's keys with '_' for '.'.
        named = [(n.replace(".", "_"), p) for n, p in model.named_parameters()]
        opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                      named, config=str(config), rank=0, world_size=1,
                                      server=server.address)
        gp.broadcast_parameters(named, opt)
        (x, y), _ = gp.worker_data(str(config), rank=0, world_size=1, epoch=0)
        rows = []
        for b in range(0, len(y), 32):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[b:b + 32]), y[b:b + 32])
            loss.backward()
            opt.step()
            s = opt.stats()
            rows.append({"step": s["step"], "loss": loss.item(), "bytes_up": s["bytes_up"],
                         "bytes_down": s["bytes_down"]})
        opt.close()
    finally:
        server.stop()
    return rows


def test_python_and_cpp_workers_send_the_same_payloads(tmp_path):
    torch.manual_seed(11)
    model_path = tmp_path / "cnn.pt"
    torch.jit.script(Cnn()).save(str(model_path))
    config = job(tmp_path, model_path)
    cpp = cpp_run(tmp_path, config)
    py = python_run(tmp_path, config, model_path)
    assert [r["step"] for r in cpp] == [r["step"] for r in py] == list(range(8))
    assert [r["bytes_up"] for r in py] == [r["bytes_up"] for r in cpp]
    assert [r["bytes_down"] for r in py] == [r["bytes_down"] for r in cpp]
    for c, p in zip(cpp, py):  # metrics.jsonl keeps 10 significant digits
        assert abs(c["loss"] - p["loss"]) <= 1e-8 * max(1.0, abs(c["loss"])), (c, p)
    assert len(set(r["bytes_up"] for r in py)) > 1 or len(set(r["loss"] for r in py)) > 1
