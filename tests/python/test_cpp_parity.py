"""A Python worker and gradpress-worker send the same payloads: the same TorchScript CNN, the
job's synthetic data in gradpress-worker's order (gp.worker_data), the same codecs and seeds,
each against its own server. Method 5 with error feedback both ways makes every step's payload
depend on all earlier ones, so equal bytes and equal losses step after step mean equal
payloads. The step engine's features run alike in both: DGC's local clipping, its sparsity
warm-up, and the dynamic ladder's codec per epoch."""
import json
import subprocess

import pytest
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


# The jobs: (epochs, momentum of the local SGD, the codec and compress lines).
JOBS = {
    "m5": (1, 0.9, f"push: {M5}\npull: {M5}\ncompress: {{min_numel: 100}}\n"),
    "m5_clip": (1, 0.9, f"push: {M5}\npull: {M5}\ncompress: {{min_numel: 100, clip_norm: 0.5}}\n"),
    # DGC: the momentum lives in the push codec, the local SGD has none.
    "dgc_warmup": (2, 0.0, "push: {codec: dgc, ratio: 0.01}\npull: {codec: threshold, "
                   "threshold: 0}\ncompress: {min_numel: 100, momentum_correction: 0.9, "
                   "warmup_epochs: 1}\n"),
    # Thresholds no epoch meets: the ladder moves up a rung every epoch.
    "dynamic": (3, 0.9, "push: {codec: qsgd, levels: 7, elias: false}\npull: {codec: none}\n"
                "compress:\n  min_numel: 100\n  dynamic:\n    ladder: \"qsgd levels=3 "
                "elias=false | qsgd levels=15 elias=false | qsgd levels=127 elias=false\"\n"
                "    acc_threshold: 1.0\n    loss_threshold: 1.0\n"),
}


def job(tmp_path, model_path, name="m5"):
    epochs, momentum, codecs = JOBS[name]
    text = (f"name: parity\nmodel: {{name: torchscript, path: {model_path}}}\n"
            "dataset: {name: synthetic, subset: 256, test_subset: 64}\n"
            f"train: {{epochs: {epochs}, batch_size: 32, lr: 0.05, momentum: {momentum}, seed: 3, "
            "threads: 1}\n"
            "cluster: {workers: 1}\n"
            "sync: {mode: sync, exchange: gradients, every: 1, overlap: false}\n"
            f"{codecs}"
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
    return metrics(d / "run")


def metrics(run_dir):
    """The step rows and the codec policy's lines (push_codec, push_density) of a run."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if "bytes_up" in x and "epoch_s" not in x]
    policy = [{k: x[k] for k in ("epoch", "step", "push_codec", "push_density") if k in x}
              for x in rows if "push_codec" in x or "push_density" in x]
    return steps, policy


def python_run(tmp_path, config, model_path, name="m5"):
    epochs, momentum, _ = JOBS[name]
    d = tmp_path / "python"
    d.mkdir()
    server = gp_testlib.Server(d, config, workers=1)
    try:
        torch.set_num_threads(1)
        model = torch.jit.load(str(model_path))
        model.train()
        # gradpress-worker names a TorchScript model's keys with '_' for '.'.
        named = [(n.replace(".", "_"), p) for n, p in model.named_parameters()]
        opt = gp.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum), named,
            config=str(config), rank=0, world_size=1, server=server.address,
            run_dir=str(d / "run"))
        gp.broadcast_parameters(named, opt)
        rows = []
        for epoch in range(epochs):
            (x, y), (tx, ty) = gp.worker_data(str(config), rank=0, world_size=1, epoch=epoch)
            for b in range(0, len(y), 32):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x[b:b + 32]), y[b:b + 32])
                loss.backward()
                opt.step()
                st = opt.stats()
                rows.append({"step": st["step"], "loss": loss.item(), "bytes_up": st["bytes_up"],
                             "bytes_down": st["bytes_down"]})
            # As gradpress-worker: test accuracy, and the mean loss over the training images
            # (all 256 here, the first 4096 in general) for the dynamic ladder, in eval mode.
            model.eval()
            with torch.no_grad():
                acc = (model(tx).argmax(1) == ty).sum().item() / len(ty)
                probe = torch.nn.functional.cross_entropy(model(x), y, reduction="sum").item()
            model.train()
            opt.end_epoch(epoch, acc, probe / len(y))
        opt.close()
    finally:
        server.stop()
    return rows, metrics(d / "run")[1]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_python_and_cpp_workers_send_the_same_payloads(tmp_path, name):
    torch.manual_seed(11)
    model_path = tmp_path / "cnn.pt"
    torch.jit.script(Cnn()).save(str(model_path))
    config = job(tmp_path, model_path, name)
    cpp, cpp_policy = cpp_run(tmp_path, config)
    py, py_policy = python_run(tmp_path, config, model_path, name)
    assert py_policy == cpp_policy
    if name == "dgc_warmup":  # the density of epoch 0, then the target's from epoch 1
        assert [p["push_density"] for p in py_policy] == [0.25, 0.01]
    if name == "dynamic":  # from the second epoch's end on, one rung up per epoch
        assert [p["push_codec"] for p in py_policy] == [
            "qsgd levels=15 elias=false", "qsgd levels=127 elias=false"]
    epochs = JOBS[name][0]
    assert [r["step"] for r in cpp] == [r["step"] for r in py] == list(range(8 * epochs))
    assert [r["bytes_up"] for r in py] == [r["bytes_up"] for r in cpp]
    assert [r["bytes_down"] for r in py] == [r["bytes_down"] for r in cpp]
    for c, p in zip(cpp, py):  # metrics.jsonl keeps 10 significant digits
        assert abs(c["loss"] - p["loss"]) <= 1e-8 * max(1.0, abs(c["loss"])), (c, p)
    assert len(set(r["bytes_up"] for r in py)) > 1 or len(set(r["loss"] for r in py)) > 1
