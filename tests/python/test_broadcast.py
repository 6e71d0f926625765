"""Horovod's broadcasts on gradpress.torch: broadcast_parameters(root_rank=) makes the root's
weights the job's whoever connects first; broadcast_optimizer_state and broadcast_object carry
the root's state and objects to every worker; under method 1 every param group's lr reaches the
server's SGD. Two workers as threads of the test's process against a real gradpress-server."""
import threading
import time

import pytest
import torch

import gp_testlib
import gradpress.torch as gp
from gp_testlib import Server, job_yaml

TIMEOUT_S = 120


class Worker:
    """fn() on a thread of its own; result() joins it (with a deadline) and returns its value
    or raises its exception."""

    def __init__(self, fn):
        self._out = {}

        def run():
            try:
                self._out["value"] = fn()
            except BaseException as e:  # handed to the test's thread
                self._out["error"] = e

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self):
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive(), f"a worker's thread did not end in {TIMEOUT_S} s"
        if "error" in self._out:
            raise self._out["error"]
        return self._out.get("value")


def both(fn):
    """fn(0) and fn(1) at once (a synchronous step needs both workers); their results."""
    workers = [Worker(lambda r=r: fn(r)) for r in range(2)]
    return [w.result() for w in workers]


def wait_until(condition, what):
    """Polls condition() until it holds; fails after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    tick = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        tick.wait(0.01)


class Job:
    """A gradpress-server for `workers` and one DistributedOptimizer per rank (not connected)."""

    def __init__(self, tmp_path, workers=2, optimizer=None, groups=None, server_extra="",
                 deadline_s=60, **yaml):
        self.config = tmp_path / "job.yaml"
        self.config.write_text(job_yaml(workers=workers, **yaml).replace(
            "deadline_s: 60}", f"deadline_s: {deadline_s}{server_extra}}}"))
        self.server = Server(tmp_path, self.config, workers=workers)
        self.models, self.opts = [], []
        try:
            for r in range(workers):
                model = gp_testlib.make_model()
                params = model.parameters() if groups is None else groups(model)
                inner = (optimizer or (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)))(params)
                self.models.append(model)
                self.opts.append(gp.DistributedOptimizer(
                    inner, model.named_parameters(), config=str(self.config), rank=r,
                    world_size=workers, server=self.server.address))
        except BaseException:
            self.close()
            raise

    def step(self, rank, step):
        x, y = gp_testlib.batch(rank, step)
        opt, model = self.opts[rank], self.models[rank]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    def weights(self, rank):
        return {n: p.detach().clone() for n, p in self.models[rank].named_parameters()}

    def close(self):
        for o in self.opts:
            o.close(flush_rows=False)
        self.server.stop()


@pytest.fixture
def job(tmp_path, request):
    j = Job(tmp_path, **getattr(request, "param", {}))
    yield j
    j.close()


def test_root_rank_1_weights_win_although_rank_0_connects_first(job):
    with torch.no_grad():  # rank 1's own initial weights differ from rank 0's
        for p in job.models[1].parameters():
            p.add_(1.0)
    root_weights = job.weights(1)
    rank0 = Worker(lambda: gp.broadcast_parameters(job.models[0], root_rank=1))
    # Rank 0 registered and waits on the server for the root's weights, offering none.
    wait_until(lambda: "gradpress_weights_waiting 1\n" in job.opts[1]._session.server_stats(),
               "rank 0 waits for the initial weights")
    assert gp.broadcast_parameters(job.models[1].named_parameters(), root_rank=1) is True
    assert rank0.result() is False  # it offered nothing
    for r in range(2):
        for name, want in root_weights.items():
            assert torch.equal(job.weights(r)[name], want), f"rank {r} {name}"
    both(lambda r: job.step(r, 0))  # they train on from the same weights
    assert all(torch.equal(job.weights(0)[n], job.weights(1)[n]) for n in root_weights)


def test_horovod_positional_root_rank(job):
    with torch.no_grad():
        for p in job.models[1].parameters():
            p.add_(1.0)
    root_weights = job.weights(1)
    both(lambda r: gp.broadcast_parameters(job.models[r].named_parameters(), 1))
    for r in range(2):
        assert all(torch.equal(job.weights(r)[n], w) for n, w in root_weights.items())


def test_bad_broadcasts_are_clear_errors(tmp_path):
    job = Job(tmp_path, server_extra=", max_broadcast_mb: 1", deadline_s=1)
    try:
        for bad in (2, -1):
            with pytest.raises(ValueError, match=f"root_rank {bad} is outside"):
                gp.broadcast_parameters(job.models[0], root_rank=bad)
        with pytest.raises(RuntimeError, match="broadcast_parameters first"):
            gp.broadcast_object(1, optimizer=job.opts[0])
        gp.broadcast_parameters(job.models[0])  # the root: offers, returns at once
        gp.broadcast_parameters(job.models[1])
        with pytest.raises(ValueError, match="root_rank 5 is outside"):
            gp.broadcast_optimizer_state(job.opts[0], root_rank=5)
        with pytest.raises(ValueError, match="server.max_broadcast_mb"):
            gp.broadcast_object(b"x" * (2 << 20), optimizer=job.opts[0])
        with pytest.raises(RuntimeError, match="broadcast 'object:never' round 0"):
            gp.broadcast_object(None, name="never", optimizer=job.opts[1])
        with pytest.raises(ValueError, match="2 DistributedOptimizers are open"):
            gp.broadcast_object(None)
        # The server goes on: a good broadcast after the refused ones.
        got = both(lambda r: gp.broadcast_object({"ok": r}, name="after", optimizer=job.opts[r]))
        assert got == [{"ok": 0}, {"ok": 0}]
    finally:
        job.close()


@pytest.mark.parametrize("job", [
    {},
    {"optimizer": lambda p: torch.optim.Adam(p, lr=0.01)},
], ids=["sgd-momentum", "adam"], indirect=True)
def test_broadcast_optimizer_state_gives_every_worker_the_roots(job):
    both(lambda r: gp.broadcast_parameters(job.models[r]))
    both(lambda r: job.step(r, 0))
    # Rank 0's state becomes its own: every tensor of it replaced by seeded noise, and a
    # hyperparameter changed (a user's loaded checkpoint, say).
    g = torch.Generator().manual_seed(3)
    root = job.opts[0]
    for state in root.state.values():
        for k, v in state.items():
            if torch.is_tensor(v) and v.is_floating_point():
                state[k] = torch.rand(v.shape, generator=g) if v.dim() else v + 5  # >= 0: exp_avg_sq too
    root.param_groups[0]["lr"] = 0.0123
    want = {job.opts[0]._names[i]: {k: (v.clone() if torch.is_tensor(v) else v)
                                    for k, v in root.state[p].items()}
            for i, p in enumerate(job.opts[0]._params)}
    assert any(not torch.equal(job.opts[1].state[p][k], want[n][k])
               for n, p in zip(job.opts[1]._names, job.opts[1]._params) for k in want[n]
               if torch.is_tensor(want[n][k]))
    both(lambda r: gp.broadcast_optimizer_state(job.opts[r], root_rank=0))
    for r in range(2):
        opt = job.opts[r]
        assert opt.param_groups[0]["lr"] == 0.0123
        for name, p in zip(opt._names, opt._params):
            assert sorted(opt.state[p]) == sorted(want[name])
            for k, v in want[name].items():
                got = opt.state[p][k]
                assert torch.equal(got, v) if torch.is_tensor(v) else got == v, \
                    f"rank {r} {name} {k}"
    both(lambda r: job.step(r, 1))  # the same state and gradients: the same weights after
    assert all(torch.equal(job.weights(0)[n], w) for n, w in job.weights(1).items())


def test_broadcast_object_rounds(job):
    both(lambda r: gp.broadcast_parameters(job.models[r]))
    first = {"epoch": 3, "t": torch.arange(5.0)}
    got = both(lambda r: gp.broadcast_object(first if r == 1 else None, root_rank=1,
                                             optimizer=job.opts[r]))
    for obj in got:
        assert obj["epoch"] == 3 and torch.equal(obj["t"], first["t"])
    got = both(lambda r: gp.broadcast_object(["second", r], root_rank=0, optimizer=job.opts[r]))
    assert got == [["second", 0], ["second", 0]]


@pytest.mark.parametrize("overlap,bucket_mb", [(False, 4.0), (True, 0.001)],
                         ids=["serial", "buckets"])
def test_lr_of_every_param_group_reaches_the_servers_sgd(tmp_path, overlap, bucket_mb):
    """Method 1: two groups with their own lr, group 1's lr halved every step by a scheduler;
    the weights equal plain SGD with those lrs on both workers' batches."""
    def groups(model):
        return [{"params": list(model.conv.parameters()) + list(model.fc1.parameters())},
                {"params": list(model.fc2.parameters()), "lr": 0.03}]

    def schedule(opt):
        return torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 1.0, lambda s: 0.5 ** s])

    steps = 3
    job = Job(tmp_path, groups=groups, exchange="weights", overlap=overlap, bucket_mb=bucket_mb,
              optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    try:
        scheds = [schedule(o) for o in job.opts]
        both(lambda r: gp.broadcast_parameters(job.models[r]))

        def train(r):
            for step in range(steps):
                job.step(r, step)
                scheds[r].step()
        both(train)
        model = gp_testlib.make_model()
        ref = torch.optim.SGD(groups(model), lr=0.1, momentum=0.9)  # the job's train.momentum
        ref_sched = schedule(ref)
        for step in range(steps):
            xs, ys = zip(*(gp_testlib.batch(r, step) for r in range(2)))
            ref.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
            ref.step()
            ref_sched.step()
        for r in range(2):
            for name, p in model.named_parameters():
                torch.testing.assert_close(job.weights(r)[name], p.detach(), rtol=0, atol=1e-6,
                                           msg=f"rank {r} {name}")
    finally:
        job.close()
