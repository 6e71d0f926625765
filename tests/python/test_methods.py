"""gradpress.torch beyond methods 3-5 in sync: method 6 (sync.every, the epoch rule), async
methods 1-2 and several server shards, with the keys the C++ worker takes (issue 31)."""
import torch

import gp_testlib
from gp_testlib import assert_weights_match, job_yaml, train_pair


def local_sgd_reference(steps, every, lr, momentum):
    """Two workers stepping SGD on their own batches from the same init; every `every` steps
    both take the mean of their weights (method 6 with codec none: the anchor minus the
    averaged update). Each keeps its own momentum buffer, as each worker's optimizer does."""
    models = [gp_testlib.make_model() for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum) for m in models]
    for step in range(steps):
        for r, (m, o) in enumerate(zip(models, opts)):
            x, y = gp_testlib.batch(r, step)
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            o.step()
        if (step + 1) % every == 0:
            with torch.no_grad():
                for p0, p1 in zip(models[0].parameters(), models[1].parameters()):
                    mean = (p0 + p1) / 2
                    p0.copy_(mean)
                    p1.copy_(mean)
    return [{n: p.detach().clone() for n, p in m.named_parameters()} for m in models]


def test_method6_local_steps_then_the_average_every_k(tmp_path):
    # sync.every 2, codec none: steps 0-1 local, then both workers hold the mean; steps 2-3
    # likewise. model_selection average: end_epoch has nothing left to sync (4 = 2 x 2).
    steps, every = 4, 2
    w = train_pair(tmp_path, job_yaml(overlap=False, every=every,
                                      sync_extra=", model_selection: average"), steps,
                   extra=["--end-epoch"])
    ref = local_sgd_reference(steps, every, lr=0.1, momentum=0.9)
    assert_weights_match(w, ref[0])
    assert [x["adopted"] for x in w] == [0.5, 0.6]  # average: each keeps its own accuracy
    # Bytes only on the syncing steps (the second of each pair).
    ups = [s["bytes_up"] for s in w[0]["stats"]]
    assert ups[0] == 0 and ups[2] == 0 and ups[1] > 0 and ups[3] > 0, ups


def test_method6_best_worker_rule_at_the_end_of_an_epoch(tmp_path):
    # model_selection best: rank 1 reports the better accuracy (0.6), so both workers end
    # with rank 1's weights, its local step after the last sync included.
    w = train_pair(tmp_path, job_yaml(overlap=False, every=2, sync_extra=", model_selection: best"),
                   steps=3, extra=["--end-epoch"])
    assert [x["adopted"] for x in w] == [0.6, 0.6]
    for name, p in w[1]["before_epoch"].items():
        assert torch.equal(w[0]["weights"][name], p), name
        assert torch.equal(w[1]["weights"][name], p), name
    assert not torch.equal(w[0]["before_epoch"]["fc2.weight"], w[1]["before_epoch"]["fc2.weight"])


def test_async_method1_every_push_counts(tmp_path):
    # Method 1 asynchronous: each worker's push steps the server's SGD at once; with
    # max_staleness above the steps none is refused, so the server counts 2 x 4 pushes.
    steps = 4
    w = train_pair(tmp_path, job_yaml(overlap=False, exchange="weights", mode="async",
                                      sync_extra=", max_staleness: 16"), steps)
    for r in range(2):
        assert [s["step"] for s in w[r]["stats"]] == list(range(steps))  # local steps from 0
        assert not any(s.get("stale") for s in w[r]["stats"])
    assert max(w[r]["stats"][-1]["server_step"] for r in range(2)) == 2 * steps


def test_two_server_shards_match_one_process(tmp_path):
    # The model's keys spread over 2 shards (cluster.partition_mb small enough to split it);
    # codec none, method 3: the weights of one process training on both workers' batches.
    steps = 3
    text = job_yaml(overlap=False) + "cluster: {workers: 2, partition_mb: 0.001}\n"
    text = text.replace("cluster: {workers: 2}\n", "", 1)
    w = train_pair(tmp_path, text, steps, env={}, shards=2)
    ref = gp_testlib.reference_weights(steps, workers=2, lr=0.1, momentum=0.9)
    assert_weights_match(w, ref)


def test_restarted_worker_rejoins_with_load_state_dict(tmp_path):
    # Method 5 (error feedback both ways): rank 1 saves model.state_dict() and
    # optimizer.state_dict() after step 1 and dies; restarted (incarnation 2) it loads both,
    # rejoins through broadcast_parameters and trains steps 2-4. The job ends with the weights
    # of a run nobody left: the residuals, momenta and step came back with the state.
    m5 = "{codec: topk, ratio: 0.1, then: {codec: qsgd, levels: 16}, error_feedback: true}"
    text = job_yaml(push=m5, pull=m5, overlap=False, min_numel=100)
    steps = 5
    (tmp_path / "whole").mkdir()
    whole = train_pair(tmp_path / "whole", text, steps)
    run = tmp_path / "restart"
    run.mkdir()
    config = run / "job.yaml"
    config.write_text(text)
    server = gp_testlib.Server(run, config)
    ckpt = run / "rank1.ckpt"

    def args(r, *extra):
        return ["--config", str(config), "--steps", str(steps), "--out", str(run / f"w{r}.pt"),
                "--rank", str(r), "--world-size", "2", "--server", server.address,
                "--checkpoint", str(ckpt)] + list(extra)
    try:
        rank0 = gp_testlib.start_worker(args(0))
        (rc, text1), = gp_testlib.run_workers([args(1, "--die-after", "1")])
        assert rc == 3 and ckpt.exists(), text1
        (rc, text1), = gp_testlib.run_workers([args(1, "--resume", "--incarnation", "2")])
        assert rc == 0, f"restarted rank 1:\n{text1}\nserver:\n{server.log()}"
        text0, _ = rank0.communicate(timeout=120)
        assert rank0.returncode == 0, f"rank 0:\n{text0}\nserver:\n{server.log()}"
    finally:
        if rank0.poll() is None:
            rank0.kill()
        server.stop()
    w = [torch.load(run / f"w{r}.pt") for r in range(2)]
    assert [s["step"] for s in w[1]["stats"]] == [2, 3, 4]
    for name, expected in whole[0]["weights"].items():
        for r in range(2):
            assert torch.equal(w[r]["weights"][name], expected), f"rank {r} {name}"
