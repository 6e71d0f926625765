"""gradpress.torch refuses bad input with a clear Python exception, never a crash. None of
these needs a server: they fail before the first call to one."""
import pytest
import torch

import gp_testlib
import gradpress.torch as gp


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


def make(model, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 2)
    kw.setdefault("server", "127.0.0.1:1")  # never dialled: nothing here connects
    return gp.DistributedOptimizer(sgd(model), model.named_parameters(), **kw)


def test_unknown_codec_is_a_value_error():
    model = gp_testlib.make_model()
    with pytest.raises(ValueError, match="nosuchcodec"):
        make(model, push="nosuchcodec ratio=0.1")
    with pytest.raises(ValueError, match="nosuchcodec"):
        make(model, pull={"codec": "nosuchcodec"})
    with pytest.raises(ValueError, match="ratio"):
        make(model, push={"codec": "topk", "ratio": "many"})


def test_codec_shorthand_and_dict_are_one_config():
    model = gp_testlib.make_model()
    a = make(model, push="topk error_feedback=true ratio=0.01 then=qsgd levels=16")
    b = make(model, push={"codec": "topk", "ratio": 0.01, "error_feedback": True,
                          "then": {"codec": "qsgd", "levels": 16}})
    assert a.config_yaml == b.config_yaml
    assert "topk" in a.config_yaml and "qsgd" in a.config_yaml
    a.close()
    b.close()


def test_bad_config_and_identity():
    model = gp_testlib.make_model()
    with pytest.raises(ValueError, match="no such file"):
        make(model, config="/nonexistent/job.yaml")
    with pytest.raises(ValueError, match="did you mean 'train.lr'"):
        make(model, overrides=["train.lrr=0.1"])
    with pytest.raises(ValueError, match="rank"):
        make(model, rank=2, world_size=2)
    with pytest.raises(ValueError, match="warmup_epochs"):  # qsgd has no density to warm up
        make(model, overrides=["push={codec: qsgd, levels: 8}", "compress.warmup_epochs=2"])
    with pytest.raises(TypeError):
        make(model, push=3)


def test_parameter_that_is_not_a_leaf():
    model = gp_testlib.make_model()
    opt = sgd(model)
    named = list(model.named_parameters())
    named[0] = ("conv.weight", named[0][1] * 2)  # computed, not a leaf
    with pytest.raises(ValueError, match="not a leaf"):
        gp.DistributedOptimizer(opt, named, rank=0, world_size=2, server="127.0.0.1:1")


def test_named_parameters_must_match_the_optimizer():
    model = gp_testlib.make_model()
    with pytest.raises(ValueError, match="does not name"):
        gp.DistributedOptimizer(sgd(model), list(model.named_parameters())[1:], rank=0,
                                world_size=2, server="127.0.0.1:1")
    extra = list(model.named_parameters()) + [("extra", torch.nn.Parameter(torch.zeros(3)))]
    with pytest.raises(ValueError, match="'extra' is not in the optimizer"):
        gp.DistributedOptimizer(sgd(model), extra, rank=0, world_size=2, server="127.0.0.1:1")
    with pytest.raises(ValueError, match="repeats"):
        gp.DistributedOptimizer(sgd(model), list(model.named_parameters()) * 2, rank=0,
                                world_size=2, server="127.0.0.1:1")
    with pytest.raises(TypeError):
        gp.DistributedOptimizer(model, model.named_parameters())


def test_backward_or_step_before_broadcast():
    model = gp_testlib.make_model()
    x, y = gp_testlib.batch(0, 0)
    buckets = make(model, bucket_mb=0.001)  # hooks: the error comes out of backward
    with pytest.raises(RuntimeError, match="broadcast_parameters"):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    buckets.close()
    serial = make(model, overrides=["sync.overlap=false"])  # no hooks: step() says it
    torch.nn.functional.cross_entropy(model(x), y).backward()
    with pytest.raises(RuntimeError, match="broadcast_parameters"):
        serial.step()
    serial.close()
    with pytest.raises(RuntimeError, match="closed"):
        serial.step()


def test_broadcast_checks_its_parameters():
    model = gp_testlib.make_model()
    opt = make(model)
    other = gp_testlib.make_model()
    with pytest.raises(ValueError, match="not the tensor"):
        gp.broadcast_parameters(other, opt)
    with pytest.raises(ValueError, match="missing"):
        gp.broadcast_parameters(list(model.named_parameters())[1:], opt)
    opt.close()
    with pytest.raises(RuntimeError, match="DistributedOptimizer"):
        gp.broadcast_parameters(model, opt)


def test_works_with_lr_schedulers():
    model = gp_testlib.make_model()
    opt = make(model)
    assert isinstance(opt, torch.optim.Optimizer)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    assert opt.param_groups[0]["lr"] == 0.1
    assert sched.get_last_lr() == [0.1]
    opt.close()
