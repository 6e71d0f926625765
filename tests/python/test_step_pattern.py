"""Horovod's step patterns on gradpress.torch: synchronize() then the user's own change of the
averaged gradients then step() under skip_synchronize(); a gradient changed after its hook sent
it is reported; backward_passes_per_step accumulates; a second step() without backward is an
error. One worker in the test's own process against a real gradpress-server."""
import contextlib
import warnings

import pytest
import torch

import gp_testlib
import gradpress.torch as gp
from gp_testlib import Server, job_yaml

LR = 0.1


@contextlib.contextmanager
def one_worker(tmp_path, backward_passes_per_step=1, **job):
    config = tmp_path / "job.yaml"
    config.write_text(job_yaml(workers=1, momentum=0.0, **job))
    server = Server(tmp_path, config, workers=1)
    try:
        model = gp_testlib.make_model()
        opt = gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                      model.named_parameters(), config=str(config), rank=0,
                                      world_size=1, server=server.address,
                                      backward_passes_per_step=backward_passes_per_step)
        gp.broadcast_parameters(model, opt)
        yield model, opt
        opt.close()
    finally:
        server.stop()


def backward(model, step):
    x, y = gp_testlib.batch(0, step)
    torch.nn.functional.cross_entropy(model(x), y).backward()


def total_norm(model):
    return torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "buckets"])
def test_clipping_after_synchronize_clips_the_averaged_gradients(tmp_path, overlap):
    # Top-k 10% without error feedback: the averaged gradients differ from the worker's own,
    # so the norm checked is the exchanged gradients'.
    with one_worker(tmp_path, overlap=overlap, bucket_mb=0.001, min_numel=100,
                    push="{codec: topk, ratio: 0.1}") as (model, opt):
        opt.zero_grad()
        backward(model, 0)
        own = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.synchronize()
        averaged = {n: p.grad.clone() for n, p in model.named_parameters()}
        assert any(not torch.equal(own[n], averaged[n]) for n in own)  # sparsified
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        norm = total_norm(model)
        max_norm = norm / 4
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        assert total_norm(model) == pytest.approx(max_norm, rel=1e-4)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # none is raised
            with opt.skip_synchronize():
                opt.step()
        for n, p in model.named_parameters():  # SGD stepped on the clipped averaged gradients
            want = before[n] - LR * averaged[n] * (max_norm / norm)
            torch.testing.assert_close(p.detach(), want, rtol=1e-4, atol=1e-6)
        assert opt.stats()["step"] == 0


def test_step_under_skip_synchronize_without_synchronize_is_refused(tmp_path):
    with one_worker(tmp_path, overlap=False) as (model, opt):
        opt.zero_grad()
        backward(model, 0)
        with pytest.raises(RuntimeError, match="synchronize"):
            with opt.skip_synchronize():
                opt.step()
        opt.step()  # the step was not lost
        assert opt.stats()["step"] == 0


def test_a_gradient_changed_after_its_hook_is_reported_once(tmp_path):
    # The pipelined step: each bucket left during backward, so clipping p.grad between
    # backward() and step() changes nothing that was exchanged.
    with one_worker(tmp_path, overlap=True, bucket_mb=0.001) as (model, opt):
        for step in range(2):
            opt.zero_grad()
            backward(model, step)
            torch.nn.utils.clip_grad_norm_(model.parameters(), total_norm(model) / 2)
            if step == 0:
                with pytest.warns(RuntimeWarning, match="changed after backward sent it") as w:
                    opt.step()
                assert "synchronize()" in str(w[0].message)
                assert any(f"'{n}'" in str(w[0].message) for n, _ in model.named_parameters())
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", RuntimeWarning)  # reported once only
                    opt.step()


def test_a_second_step_without_backward_is_an_error(tmp_path):
    with one_worker(tmp_path, overlap=False) as (model, opt):
        opt.zero_grad()
        backward(model, 0)
        opt.step()
        with pytest.raises(RuntimeError, match="without a backward pass"):
            opt.step()
        backward(model, 1)
        opt.step()
        assert opt.stats()["step"] == 1


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "buckets"])
def test_backward_passes_per_step_exchange_the_sum_once(tmp_path, overlap):
    with one_worker(tmp_path, backward_passes_per_step=2, overlap=overlap,
                    bucket_mb=0.001) as (model, opt):
        reference = gp_testlib.make_model()
        reference.load_state_dict(model.state_dict())
        ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
        for step in range(2):
            opt.zero_grad()
            ref_opt.zero_grad()
            for k in range(2):
                backward(model, 2 * step + k)
                backward(reference, 2 * step + k)
            opt.step()
            ref_opt.step()
            assert opt.stats()["step"] == step  # one exchange per two backward passes
        for (n, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6, msg=n)
        opt.zero_grad()
        for k in range(2):
            backward(model, 10 + k)
        with pytest.raises(RuntimeError, match="got 3 gradients"):
            backward(model, 12)


def test_backward_passes_per_step_must_be_a_positive_integer(tmp_path):
    model = gp_testlib.make_model()
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        gp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                model.named_parameters(), rank=0, world_size=1,
                                backward_passes_per_step=0)
