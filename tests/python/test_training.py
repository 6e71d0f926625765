"""Two gradpress.torch workers (processes) against a real gradpress-server (issue 31)."""
import json

import pytest
import torch

import gp_testlib
import gradpress.torch as gp
from gp_testlib import Server, job_yaml, train_pair


@pytest.mark.parametrize("exchange", ["gradients", "weights"], ids=["method3", "method1"])
@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "buckets"])
def test_codec_none_matches_one_process_on_both_batches(tmp_path, overlap, exchange):
    # bucket_mb 0.001: the pipelined step has 3 buckets (fc2, fc1, conv). Method 1: the
    # server's SGD (train.momentum 0.9 of the job) with the workers' lr, weights down.
    steps = 4
    w = train_pair(tmp_path, job_yaml(overlap=overlap, bucket_mb=0.001, exchange=exchange), steps)
    ref = gp_testlib.reference_weights(steps, workers=2, lr=0.1, momentum=0.9)
    gp_testlib.assert_weights_match(w, ref)
    assert [x["won"] for x in w].count(True) == 1  # one worker's initial weights won
    s = w[0]["stats"][-1]
    dense = sum(p.numel() * 4 for p in gp_testlib.make_model().parameters())
    assert s["bytes_up"] == dense and s["bytes_down"] == dense
    assert s["overlap"] == overlap and s["step"] == steps - 1


def test_method5_two_workers_train_alike(tmp_path):
    # Method 5: top-k 1% then QSGD both ways with error feedback; an unused parameter; the
    # identity from RANK / WORLD_SIZE / GRADPRESS_SERVER; the run directory's files.
    m5 = "{codec: topk, ratio: 0.05, then: {codec: qsgd, levels: 16}, error_feedback: true}"
    steps = 5
    w = train_pair(tmp_path, job_yaml(push=m5, pull=m5, bucket_mb=0.001, min_numel=100), steps,
                   extra=["--unused"], env={}, run_dir=True)
    for name, p0 in w[0]["weights"].items():  # every worker applies the same averaged update
        assert torch.equal(p0, w[1]["weights"][name]), name
    dense = sum(p.numel() * 4 for p in gp_testlib.make_model(True).parameters())
    for r in range(2):
        for s in w[r]["stats"]:
            assert 0 < s["bytes_up"] < dense / 4 and 0 < s["bytes_down"] < dense / 4
            assert s["encode_ms"] >= 0 and s["wait_ms"] >= 0 and s["step_ms"] > 0
        assert len(w[r]["state"]["codec_state"]) > 0  # error-feedback residuals
        assert torch.count_nonzero(w[r]["unused_grad"]) == 0  # exchanged as zeros
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sorted((x["rank"], x["step"]) for x in lines) == [(r, s) for r in range(2)
                                                             for s in range(steps)]
    assert all(x["bytes_up"] > 0 and "network_ms" in x for x in lines)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == steps and summary["runner"] == "python"
    assert summary["ratio_up"] > 4 and summary["bytes_up_per_step"] > 0
    assert (tmp_path / "run" / "config.yaml").exists()


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "buckets"])
def test_step_releases_the_gil_while_it_waits(tmp_path, overlap):
    # Rank 1 pushes step 0 only once a Python thread of rank 0 has run while rank 0 waits in
    # step() for rank 1's push: holding the GIL there would deadlock (and fail at the deadline).
    train_pair(tmp_path, job_yaml(overlap=overlap, bucket_mb=0.001), steps=2,
               extra=["--gil-check", str(tmp_path)])
    assert (tmp_path / "go").exists()


def test_one_worker_in_process(tmp_path):
    # One worker in the test's own process: its own gradients come back (world size 1), so it
    # trains exactly like plain SGD; a second backward in a step is refused and the loop goes on.
    config = tmp_path / "job.yaml"
    config.write_text(job_yaml(workers=1, bucket_mb=0.001,
                               push="{codec: topk, ratio: 0.1, error_feedback: true}"))
    server = Server(tmp_path, config, workers=1)
    try:
        model = gp_testlib.make_model()
        opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      model.named_parameters(), config=str(config),
                                      pull={"codec": "none"}, rank=0, world_size=1,
                                      server=server.address)
        assert gp.broadcast_parameters(model) is True  # the only worker: its weights win
        assert opt.stats() == {}
        x, y = gp_testlib.batch(0, 0)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="second gradient"):
            loss.backward()
        opt.step()
        s = opt.stats()
        assert s["step"] == 0 and s["bytes_up"] > 0 and s["overlap"]
        for key in ("bytes_down", "encode_ms", "decode_ms", "network_ms", "wait_ms",
                    "server_ms", "compute_ms", "step_ms", "exposed_comm_ms"):
            assert key in s
        sd = opt.state_dict()
        assert sd["gradpress"]["step"] == 1 and len(sd["gradpress"]["codec_state"]) > 0
        assert "state" in sd and "param_groups" in sd  # the wrapped optimizer's, as they were
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        assert opt.stats()["step"] == 1
        opt.load_state_dict(sd)
        bad = dict(sd, gradpress=dict(sd["gradpress"], codec_state=b"\x05junk"))
        with pytest.raises(ValueError):
            opt.load_state_dict(bad)
        opt.close()
    finally:
        server.stop()
