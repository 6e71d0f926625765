"""DistributedOptimizer is made as Horovod makes its own: an instance of a subclass of the
wrapped optimizer's class, built by that class's constructor over the same param groups, so
the installed torch's optimizer behaviour (defaults, hooks, step) holds. None of these needs a
server: nothing here connects."""
import pytest
import torch

import gp_testlib
import gradpress.torch as gp


def make(optimizer, model):
    return gp.DistributedOptimizer(optimizer, model.named_parameters(), rank=0, world_size=2,
                                   server="127.0.0.1:1")


@pytest.mark.parametrize("make_wrapped", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.Adam(ps, lr=3e-3, betas=(0.8, 0.99)),
    lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.05),
])
def test_an_instance_of_the_wrapped_class_with_its_defaults(make_wrapped):
    model = gp_testlib.make_model()
    wrapped = make_wrapped(model.parameters())
    opt = make(wrapped, model)
    assert isinstance(opt, type(wrapped))
    assert isinstance(opt, gp.DistributedOptimizer)
    assert type(opt).__name__ == type(wrapped).__name__
    assert type(opt) is type(make(make_wrapped(model.parameters()), model))  # made once
    assert opt.defaults == wrapped.defaults
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in wrapped.param_groups]
    assert [p for g in opt.param_groups for p in g["params"]] == list(model.parameters())
    wrapped.param_groups[0]["lr"] = 0.5  # one set of groups: a scheduler on either works
    assert opt.param_groups[0]["lr"] == 0.5
    assert "DistributedOptimizer" in repr(opt) and type(wrapped).__name__ in repr(opt)
    opt.close()


def test_the_wrapped_class_steps_and_keeps_its_state():
    # Without an exchange (local_steps off and no server), the wrapped class's step is what
    # super().step() reaches: SGD with momentum fills the shared state.
    model = gp_testlib.make_model()
    wrapped = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = make(wrapped, model)
    x, y = gp_testlib.batch(0, 0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    super(gp.DistributedOptimizer, opt).step()
    assert all(not torch.equal(before[n], p) for n, p in model.named_parameters())
    assert all("momentum_buffer" in wrapped.state[p] for p in model.parameters())
    assert opt.state is wrapped.state
    opt.close()


def test_param_groups_are_fixed_once_made():
    model = gp_testlib.make_model()
    opt = make(torch.optim.SGD(model.parameters(), lr=0.1), model)
    with pytest.raises(RuntimeError, match="wrapped optimizer"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    opt.close()


def test_broadcast_parameters_finds_the_optimizer_through_its_parameters():
    model, other = gp_testlib.make_model(), gp_testlib.make_model()
    opt = make(torch.optim.SGD(model.parameters(), lr=0.1), model)
    opt_other = make(torch.optim.SGD(other.parameters(), lr=0.1), other)
    mixed = list(model.named_parameters())[:2] + [("x." + n, p) for n, p in
                                                  other.named_parameters()]
    with pytest.raises(ValueError, match="2 DistributedOptimizers"):
        gp.broadcast_parameters(mixed)
    opt.close()
    with pytest.raises(RuntimeError, match="make the gradpress.torch.DistributedOptimizer"):
        gp.broadcast_parameters(model)  # its optimizer is closed; no other is guessed
    with pytest.raises(RuntimeError, match="make the gradpress.torch.DistributedOptimizer"):
        gp.broadcast_parameters(torch.nn.Linear(2, 2))  # nobody exchanges these
    opt_other.close()
