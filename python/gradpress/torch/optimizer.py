"""gradpress.torch.DistributedOptimizer and Horovod's broadcasts (docs/python.md)."""
import atexit
import contextlib
import io
import warnings
import weakref

import torch

from gradpress import _C
from gradpress import _config

_live = weakref.WeakSet()  # open optimizers, closed at exit (summary.json, dashboard rows)
_made = {}  # wrapped optimizer class -> its DistributedOptimizer subclass


def _named_leaves(optimizer, named_parameters):
    """(names, tensors) of the parameters to exchange, in model order, checked."""
    in_optimizer = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        named = [(f"param.{i}", p) for i, p in enumerate(in_optimizer)]
    else:
        if isinstance(named_parameters, dict):
            named_parameters = named_parameters.items()
        named = []
        for item in named_parameters:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], torch.Tensor)):
                raise ValueError("named_parameters: expected (name, tensor) pairs, like "
                                 f"model.named_parameters(); got {item!r:.80}")
            named.append(item)
    names, params, seen_names, seen = [], [], set(), set()
    for name, p in named:
        if name in seen_names:
            raise ValueError(f"named_parameters: the name '{name}' repeats")
        seen_names.add(name)
        if not p.requires_grad:
            continue  # frozen: no gradient, nothing to exchange
        if not p.is_leaf:
            raise ValueError(f"parameter '{name}' is not a leaf tensor (it is computed by "
                             f"{type(p.grad_fn).__name__}): pass the model's own parameters, "
                             "e.g. model.named_parameters()")
        if id(p) in seen:
            raise ValueError(f"parameter '{name}' is the same tensor as an earlier name")
        seen.add(id(p))
        names.append(name)
        params.append(p)
    ours = set(id(p) for p in params)
    missing = [p for p in in_optimizer if p.requires_grad and id(p) not in ours]
    if missing:
        raise ValueError(f"the optimizer holds {len(missing)} parameter(s) that named_parameters "
                         "does not name (shapes " +
                         ", ".join(str(tuple(p.shape)) for p in missing[:4]) + ")")
    in_opt = set(id(p) for p in in_optimizer)
    extra = [n for n, p in zip(names, params) if id(p) not in in_opt]
    if extra:
        raise ValueError(f"parameter '{extra[0]}' is not in the optimizer's param groups")
    if not params:
        raise ValueError("no parameter that requires a gradient to exchange")
    return names, params


def _hook(optimizer_ref, key):
    """Key's gradient to the pipelined step as backward produces it (one backward pass per
    step); the first of a step also asks autograd to note the gradients when backward ends."""
    def hook(grad):
        opt = optimizer_ref()
        if opt is None or opt._session is None:
            return
        if not opt._hooked:
            opt._hooked = True
            torch.autograd.Variable._execution_engine.queue_callback(opt._note_sent)
            opt._session.begin(*opt._step_lr())
        opt._session.gradient(key, grad)
    return hook


def _counter(optimizer_ref, key):
    """backward_passes_per_step > 1: counts key's backward passes (p.grad accumulates them)."""
    def hook(grad):
        opt = optimizer_ref()
        if opt is None:
            return
        opt._passes[key] += 1
        if opt._passes[key] > opt._backward_passes:
            raise RuntimeError(
                f"parameter '{opt._names[key]}' got {opt._passes[key]} gradients before step(): "
                f"backward_passes_per_step is {opt._backward_passes}")
    return hook


def _grad_marks(params):
    """Each parameter's gradient as it stands: (its object id, its version), or None."""
    return [None if p.grad is None else (id(p.grad), p.grad._version) for p in params]


def _subclass_for(wrapped_cls):
    """The class of a DistributedOptimizer wrapping an optimizer of `wrapped_cls`: the method
    resolution is DistributedOptimizer's methods, then the wrapped class's."""
    made = _made.get(wrapped_cls)
    if made is None:
        made = type(wrapped_cls.__name__, (DistributedOptimizer, wrapped_cls),
                    {"__module__": DistributedOptimizer.__module__,
                     "__qualname__": f"DistributedOptimizer[{wrapped_cls.__qualname__}]"})
        _made[wrapped_cls] = made
    return made


class DistributedOptimizer:
    """Wraps a PyTorch optimizer: each step's gradients are averaged over the job's workers
    by a gradpress server, compressed by the job's codecs, then the wrapped optimizer steps.

    Methods 3-5 (sync, ``exchange: gradients``): the averaged gradients come back into
    ``p.grad`` and the wrapped optimizer steps. Methods 1-2 (``exchange: weights``): the
    server steps SGD (the job's ``train.momentum``, ``weight_decay``, ``nesterov``) with the
    wrapped optimizer's lr, its weights come back into the parameters, and the wrapped
    optimizer does not step; ``sync.mode: async`` with ``sync.max_staleness`` too. Method 6
    (``sync.every: K``): the wrapped optimizer steps on the worker's own gradients, every
    K-th ``step()`` averages the update since the last sync, and ``end_epoch`` applies the
    epoch rule. ``config`` is a job YAML (the one the server
    was started with: the server decides the pull codec and the barrier); ``push``/``pull``
    override its codec blocks (a dict or a shorthand such as
    ``"topk ratio=0.01 then=qsgd levels=16 error_feedback=true"``); ``overrides`` are further
    ``key=value`` settings, like gradpress-worker's ``--set``. Under ``gradpress.launch``,
    ``config=None`` is the servers' job (``$GRADPRESS_CONFIG``) and the launch's ``--set``,
    ``--push``, ``--pull`` (``$GRADPRESS_SET``) apply before these. Identity from the arguments,
    else ``RANK``, ``WORLD_SIZE``, ``GRADPRESS_SERVER``. With ``run_dir``, the worker writes
    metrics.jsonl (and rank 0 summary.json and config.yaml) there.

    Every job feature gradpress-worker runs holds here too, through the same C++ step engine
    (worker/engine/step_engine.h): ``compress.clip_norm`` (DGC's local clipping), the dynamic ladder
    (``compress.dynamic``: pass ``train_loss`` to ``end_epoch``), DGC's warm-up
    (``compress.warmup_epochs``: call ``end_epoch`` every epoch) and ``compress.auto`` (its
    calibration trains the job's ``model``: set it to this model, e.g. as TorchScript).

    Gradients go to the exchange as backward produces them (autograd hooks feed the C++
    bucket scheduler, when the model splits into several ``sync.bucket_mb`` buckets);
    ``step()`` waits for the averaged gradients, writes them into ``p.grad`` and steps the
    wrapped optimizer. A parameter without a gradient in a step (unused) is exchanged as
    zeros. Call ``broadcast_parameters`` before the first backward.

    ``backward_passes_per_step=N`` (Horovod's): N backward passes accumulate into ``p.grad``
    (their sum; scale the loss for a mean) and ``step()`` exchanges them once. To change the
    averaged gradients before the wrapped optimizer steps (e.g. clip them), use Horovod's
    pattern: ``optimizer.synchronize()`` (the averaged gradients are then in ``p.grad``),
    your change, then ``with optimizer.skip_synchronize(): optimizer.step()``. A ``p.grad``
    changed between backward and ``step()`` after its hook sent it is not exchanged: that is
    reported once, with a warning naming the parameter.

    As Horovod's, the object returned is an instance of a subclass of the wrapped optimizer's
    own class, made at run time (``isinstance(opt, torch.optim.SGD)`` holds, and torch's
    ``Optimizer`` constructor, defaults and hooks are those of the installed torch); it shares
    the wrapped optimizer's param groups and state, and steps with its class's ``step``.
    """

    def __new__(cls, optimizer=None, *args, **kwargs):
        if cls is DistributedOptimizer:  # gp.DistributedOptimizer(opt, ...): the made subclass
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise TypeError(f"optimizer: expected a torch.optim.Optimizer, got "
                                f"{type(optimizer).__name__}")
            if isinstance(optimizer, DistributedOptimizer):
                raise TypeError("optimizer is a DistributedOptimizer already")
            cls = _subclass_for(type(optimizer))
        return object.__new__(cls)

    def __init__(self, optimizer, named_parameters=None, config=None, push=None, pull=None,
                 rank=None, world_size=None, server=None, run_dir=None, bucket_mb=None, *,
                 overrides=None, incarnation=1, backward_passes_per_step=1):
        self._session = None
        self._handles = []
        if (not isinstance(backward_passes_per_step, int) or isinstance(backward_passes_per_step, bool)
                or backward_passes_per_step < 1):
            raise ValueError("backward_passes_per_step: expected an integer >= 1, got "
                             f"{backward_passes_per_step!r}")
        names, params = _named_leaves(optimizer, named_parameters)
        group_of = {id(p): g for g, group in enumerate(optimizer.param_groups)
                    for p in group["params"]}
        self._group_of = [group_of[id(p)] for p in params]  # each key's param group
        # The wrapped class's own constructor over the same param groups (each keeps its
        # hyperparameters), as Horovod does; then the wrapped optimizer's defaults and state,
        # so lr schedulers and loops that hold either object see one state.
        self._constructing = True
        super(DistributedOptimizer, self).__init__(optimizer.param_groups)
        self._constructing = False
        self.defaults = optimizer.defaults
        self.state = optimizer.state
        self._names, self._params = names, params
        self._pending_state = None
        self._pending_auto = None
        self._restored_step = None
        self._epoch = 0  # the epoch training is in (end_epoch counts them; DGC's warm-up)
        self._stepped = False  # stats() reads the session's last step once there is one
        self._backward_passes = backward_passes_per_step
        self._passes = [0] * len(params)
        self._hooked = False  # a hook sent a gradient this step
        self._sent = None  # the gradients' marks when backward ended (hooks sent them)
        self._after_step = None  # the gradients' marks after the last step
        self._synchronized = False  # synchronize() exchanged this step
        self._skip_sync = False
        self._warned_changed = False
        config, overrides = _config.from_launch(config, overrides)
        self._session = _C.WorkerSession(
            _config.config_path(config),
            _config.job_overrides(push, pull, bucket_mb, overrides), rank, world_size,
            None if server is None else str(server), "" if run_dir is None else str(run_dir),
            int(incarnation), names, params)
        me = weakref.ref(self)
        if backward_passes_per_step > 1:  # the gradients go after the last pass, from p.grad
            self._handles = [p.register_hook(_counter(me, i)) for i, p in enumerate(params)]
        elif self._session.pipelined:
            self._handles = [p.register_hook(_hook(me, i)) for i, p in enumerate(params)]
        for p in params:  # broadcast_parameters finds the optimizer through its parameters
            p._gradpress_optimizer = me
        _live.add(self)

    # -- the identity the job resolved ------------------------------------------------------
    @property
    def rank(self):
        return self._session.rank

    @property
    def world_size(self):
        return self._session.world_size

    @property
    def config_yaml(self):
        """The resolved job config (YAML), as gradpress-worker would write it."""
        return self._session.config_yaml

    # -- the optimizer ----------------------------------------------------------------------
    def _open(self):
        if self._session is None:
            raise RuntimeError("the DistributedOptimizer is closed")
        return self._session

    def _step_lr(self):
        """The step's lr for the server's SGD (methods 1-2) or shadow weights: the first
        group's, and per key its group's when the groups' lrs differ (else an empty list)."""
        lrs = [group["lr"] for group in self.param_groups]
        if all(lr == lrs[0] for lr in lrs):
            return float(lrs[0]), []
        return float(lrs[0]), [float(lrs[g]) for g in self._group_of]

    def _note_sent(self):
        """Autograd's callback at the end of a backward whose hooks sent gradients."""
        self._sent = _grad_marks(self._params)

    def _check_gradients(self):
        """Before the exchange: a step without a backward since the last one is an error; a
        gradient changed after its hook sent it is reported once."""
        marks = _grad_marks(self._params)
        if self._after_step is not None and marks == self._after_step:
            raise RuntimeError("step() again without a backward pass since the last step(): "
                               "every step exchanges one backward's gradients (or "
                               "backward_passes_per_step of them)")
        if self._sent is not None and not self._warned_changed:
            for name, now, sent in zip(self._names, marks, self._sent):
                if now != sent:
                    self._warned_changed = True
                    warnings.warn(
                        f"gradpress.torch: the gradient of '{name}' changed after backward sent "
                        "it to the exchange (e.g. clip_grad_norm_ between backward() and "
                        "step()); the change is not exchanged. To change the averaged "
                        "gradients: optimizer.synchronize(), then the change, then "
                        "`with optimizer.skip_synchronize(): optimizer.step()`",
                        RuntimeWarning, stacklevel=3)
                    break
        self._sent = None

    def synchronize(self):
        """Exchanges this step's gradients now: the averaged gradients are in ``p.grad`` when it
        returns (methods 1-2: the server's weights are in the parameters). Then change them
        (e.g. ``torch.nn.utils.clip_grad_norm_``) and step with ``skip_synchronize()``."""
        session = self._open()
        if self._synchronized:
            return
        if session.local_steps:
            raise RuntimeError("synchronize(): method 6 (sync.every > 1) averages weights every "
                               "sync.every steps, not gradients; call step()")
        self._check_gradients()
        if self._backward_passes > 1:
            self._passes = [0] * len(self._params)
        self._hooked = False
        session.exchange(*self._step_lr())  # the GIL is released while it waits
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside it, ``step()`` does not exchange: call ``synchronize()`` first."""
        self._skip_sync = True
        try:
            yield
        finally:
            self._skip_sync = False

    def step(self, closure=None):
        session = self._open()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        wrapped_step = super(DistributedOptimizer, self).step
        if session.local_steps:  # method 6: a local step; every sync.every-th is averaged
            self._check_gradients()
            self._passes = [0] * len(self._params)
            session.prepare_gradients()  # compress.clip_norm before the local step
            wrapped_step()
            session.exchange(*self._step_lr())
        else:
            if self._skip_sync and not self._synchronized:
                raise RuntimeError("step() inside skip_synchronize() without synchronize() "
                                   "first: the gradients were not exchanged")
            self.synchronize()
            if not session.weights:  # methods 1-2: the server stepped, its weights are in place
                wrapped_step()
        self._synchronized = False
        session.end_step(float(loss) if loss is not None else 0.0)
        self._after_step = _grad_marks(self._params)
        self._stepped = True
        return loss

    def end_epoch(self, epoch, accuracy, train_loss=None):
        """The end of an epoch, with this worker's test accuracy. Method 6 applies its epoch
        rule (``sync.model_selection``: ``best``, every worker adopts the weights of the one
        with the best accuracy; ``average``, a last averaging sync) and returns the accuracy
        of the weights kept; the other methods return ``accuracy``. The dynamic ladder
        (``compress.dynamic``) chooses the next epoch's push codec from the accuracy and
        ``train_loss``: the loss on training images every worker evaluates alike (as
        gradpress-worker, the first 4096 of the training set). DGC's warm-up
        (``compress.warmup_epochs``) sets the next epoch's density. Call it on every worker."""
        kept = self._open().end_epoch(int(epoch), float(accuracy),
                                      None if train_loss is None else float(train_loss))
        self._epoch = int(epoch) + 1
        return kept

    def add_param_group(self, param_group):
        if getattr(self, "_constructing", False):  # the wrapped class's constructor
            return super(DistributedOptimizer, self).add_param_group(param_group)
        raise RuntimeError("the parameters a DistributedOptimizer exchanges are fixed when it "
                           "is made: add the group to the wrapped optimizer first")

    def stats(self):
        """The last step's figures: bytes_up, bytes_down, encode_ms, decode_ms, network_ms,
        wait_ms, server_ms, exposed_comm_ms, compute_ms, step_ms, ... ({} before a step)."""
        session = self._open()
        return session.last() if self._stepped else {}

    def state_dict(self):
        """The wrapped optimizer's state_dict plus ``"gradpress"``: the step and the push
        codecs' state (error-feedback residuals, momenta, RNG) as bytes."""
        session = self._open()
        sd = super(DistributedOptimizer, self).state_dict()
        codec = session.save_state() if session.connected else (self._pending_state or b"")
        auto = session.auto_codecs if session.connected else (self._pending_auto or [])
        sd["gradpress"] = {"step": session.step, "codec_state": codec, "names": list(self._names),
                           "epoch": self._epoch, "auto_codecs": list(auto)}
        return sd

    def load_state_dict(self, state_dict):
        session = self._open()
        state_dict = dict(state_dict)
        ours = state_dict.pop("gradpress", None)
        if ours is not None and list(ours.get("names", self._names)) != self._names:
            raise ValueError("load_state_dict: the state is of another model's parameters")
        super(DistributedOptimizer, self).load_state_dict(state_dict)
        if ours is None:
            return
        if not session.connected:
            self._restored_step = int(ours.get("step", 0))  # a restarted worker's checkpoint
        self._epoch = int(ours.get("epoch", self._epoch))
        auto = list(ours.get("auto_codecs", []))
        if auto:  # the codecs the state was saved with, whatever this start would choose
            if session.connected:
                session.auto_codecs = auto
            else:
                self._pending_auto = auto
        if not ours.get("codec_state"):
            return
        if session.connected:
            session.load_state(bytes(ours["codec_state"]))
        else:
            self._pending_state = bytes(ours["codec_state"])  # restored once registered

    def _connect(self, root_rank=None):
        session = self._open()
        ours = session.connect(self._restored_step, self._epoch, root_rank)
        if self._pending_auto is not None:
            auto, self._pending_auto = self._pending_auto, None
            session.auto_codecs = auto
        if self._pending_state is not None:
            state, self._pending_state = self._pending_state, None
            session.load_state(state)
        return ours

    # -- the end ----------------------------------------------------------------------------
    def close(self, flush_rows=True):
        """Writes summary.json (rank 0, with run_dir), sends the dashboard's last rows (unless
        flush_rows is False: then nothing waits for the server) and ends the connection."""
        for h in self._handles:
            h.remove()
        self._handles = []
        session, self._session = self._session, None
        _live.discard(self)
        if session is not None:
            session.close(flush_rows)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        wrapped = super(DistributedOptimizer, self).__repr__()
        return f"gradpress.torch.DistributedOptimizer({wrapped})"


def _root(root_rank, opt, what):
    """root_rank checked against the job: an int in [0, world_size)."""
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError(f"{what}: root_rank must be an int, got {type(root_rank).__name__}")
    if not 0 <= root_rank < opt.world_size:
        raise ValueError(f"{what}: root_rank {root_rank} is outside the job's ranks "
                         f"[0, {opt.world_size})")
    return root_rank


def _owner(params, what):
    """The open DistributedOptimizer that exchanges these parameters (each parameter knows it)."""
    refs = (getattr(p, "_gradpress_optimizer", None) for p in params)
    owners = {ref() for ref in refs if ref is not None} - {None}  # None: a closed-and-gone one
    if len(owners) > 1:
        raise ValueError(f"{what}: these parameters belong to {len(owners)} "
                         "DistributedOptimizers; pass optimizer=")
    opt = owners.pop() if owners else None
    if opt is None or opt._session is None:
        raise RuntimeError(f"{what}: make the gradpress.torch.DistributedOptimizer over these "
                           "parameters first (it holds the connection to the server)")
    return opt


def broadcast_parameters(model_or_named_params, optimizer=None, root_rank=0):
    """Registers the model with the server and adopts the job's initial weights: the weights
    of the worker of rank ``root_rank`` (Horovod's argument): it offers them, every other
    worker waits for them on the server (``server.deadline_s`` per attempt, retried) and
    offers none, whoever connects first. Returns True if this worker's were kept. (The C++
    gradpress-worker keeps the first offer.) ``model_or_named_params``: an ``nn.Module`` or
    (name, tensor) pairs / a dict of the parameters a DistributedOptimizer exchanges
    (``optimizer``, else the one made over these parameters: each parameter knows the
    optimizer that exchanges it). As in Horovod, ``broadcast_parameters(params, 0)`` also reads
    the 0 as root_rank."""
    if isinstance(optimizer, int) and not isinstance(optimizer, bool):
        optimizer, root_rank = None, optimizer  # Horovod's positional root_rank
    if isinstance(model_or_named_params, torch.nn.Module):
        named = dict(model_or_named_params.named_parameters())
    else:
        named = dict(model_or_named_params)
    opt = optimizer if optimizer is not None else _owner(named.values(), "broadcast_parameters")
    if opt._session is None:
        raise RuntimeError("broadcast_parameters: the DistributedOptimizer is closed")
    _root(root_rank, opt, "broadcast_parameters")
    ours = dict(zip(opt._names, opt._params))
    for name, p in named.items():
        if isinstance(p, torch.Tensor) and not p.requires_grad and name not in ours:
            continue  # frozen, not exchanged
        if name not in ours:
            raise ValueError(f"broadcast_parameters: '{name}' is not a parameter of the "
                             "DistributedOptimizer")
        if p is not ours[name]:
            raise ValueError(f"broadcast_parameters: '{name}' is not the tensor the "
                             "DistributedOptimizer holds under that name")
    missing = [n for n in opt._names if n not in named]
    if missing:
        raise ValueError(f"broadcast_parameters: '{missing[0]}' is missing "
                         f"({len(missing)} of the optimizer's parameters)")
    return opt._connect(root_rank)


def _broadcast_bytes(opt, data, root_rank, name, what):
    """The root's bytes to every worker through the server (the Broadcast RPC, under `name`):
    the root returns its own, the others wait for them (server.deadline_s)."""
    session = opt._open()
    _root(root_rank, opt, what)
    if not session.connected:
        raise RuntimeError(f"{what}: call broadcast_parameters first (the worker registers "
                           "with the server there)")
    root = opt.rank == root_rank
    return session.broadcast(name, root, data if root else b"")


def _to_bytes(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _from_bytes(data):
    return torch.load(io.BytesIO(data), map_location="cpu")


def broadcast_object(obj, root_rank=0, name=None, optimizer=None):
    """Horovod's broadcast_object: ``obj`` of the worker of rank ``root_rank`` (anything
    ``torch.save`` pickles), returned on every worker; the others' ``obj`` is not read.
    Every worker calls it alike, in the same order per ``name``. ``optimizer``: the
    DistributedOptimizer whose connection carries it (None: the only open one). The root's
    pickled object may be at most ``server.max_broadcast_mb``."""
    if optimizer is None:
        open_ones = [o for o in list(_live) if o._session is not None]
        if len(open_ones) != 1:
            raise ValueError(f"broadcast_object: {len(open_ones)} DistributedOptimizers are "
                             "open in this process; pass optimizer=")
        optimizer = open_ones[0]
    if not isinstance(optimizer, DistributedOptimizer):
        raise TypeError("broadcast_object: optimizer must be a gradpress.torch."
                        f"DistributedOptimizer, got {type(optimizer).__name__}")
    name = "object" if name is None else str(name)
    root = optimizer.rank == root_rank
    data = _broadcast_bytes(optimizer, _to_bytes(obj) if root else b"", root_rank,
                            "object:" + name, "broadcast_object")
    return obj if root else _from_bytes(data)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Horovod's broadcast_optimizer_state: the wrapped optimizer's state of the worker of
    rank ``root_rank`` (its ``state_dict()``: momentum buffers, Adam's moments and step, the
    param groups' hyperparameters such as lr) is loaded by every other worker's. The push
    codecs' own state (``state_dict()["gradpress"]``: residuals) stays each worker's.
    ``optimizer``: a DistributedOptimizer, or the optimizer it wraps. Call it on every worker,
    after ``broadcast_parameters``."""
    opt = optimizer
    if not isinstance(opt, DistributedOptimizer):
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError("broadcast_optimizer_state: expected an optimizer, got "
                            f"{type(optimizer).__name__}")
        opt = _owner([p for g in opt.param_groups for p in g["params"]],
                     "broadcast_optimizer_state")
    wrapped = super(DistributedOptimizer, opt)  # the wrapped class's state_dict, no "gradpress"
    root = opt.rank == root_rank
    data = _broadcast_bytes(opt, _to_bytes(wrapped.state_dict()) if root else b"", root_rank,
                            "optimizer_state", "broadcast_optimizer_state")
    if not root:
        wrapped.load_state_dict(_from_bytes(data))


@atexit.register
def _close_all():
    for opt in list(_live):
        try:
            opt.close(flush_rows=False)  # the server may be gone: do not wait for it
        except Exception:  # the process is ending; the server notices the silence
            pass
