"""PyTorch helpers (docs/api.md "PyTorch helpers"): the state of a model and its
optimizer as a state dict for :meth:`ckptdb.DB.save` and :meth:`ckptdb.DB.load`.

    state = ckptdb.torch.get_state_dict(model, optimizer)  # {"model": ..., "optim": ...}
    db.save(state, step=step)
    ...
    state = ckptdb.torch.get_state_dict(model, optimizer)
    db.load(state)                                          # fills the tensors in place
    ckptdb.torch.set_state_dict(model, optimizer, state)

The optimizer's per-parameter state is keyed by the parameter's fully qualified
name (as ``torch.distributed.checkpoint.state_dict`` does), so a checkpoint
loads into a model whose parameters are created in another order, and
``param_groups`` keep each parameter's hyper-parameters under its name (as
``torch.distributed.checkpoint`` does when it flattens an optimizer's state),
so that pipeline stages, each with an optimizer of its own, keep theirs.
Tensors are shared with the model and the optimizer, never copied. ``ShardedTensor``
leaves (and ``DTensor`` where the installed torch has one) become
:class:`ckptdb.Shard` objects of their local shard and its global offset.

This module imports torch; nothing else in ckptdb does. :data:`unavailable`
says which of those tensor types this torch cannot provide, and why.
"""

import torch

from . import InvalidArgumentError, Shard

__all__ = ["get_state_dict", "set_state_dict", "unavailable"]


def _import_sharded_tensor():
    """torch's ShardedTensor class, or the reason it cannot be imported.

    Debian's torch 1.13 on Python 3.11 fails to import the module (a dataclass
    field with a mutable default: ``ValueError: mutable default ...
    TensorProperties``); no ShardedTensor can exist in such a process, so the
    helpers need not recognise one."""
    try:
        from torch.distributed._shard.sharded_tensor import ShardedTensor
    except Exception as e:  # ImportError, or the ValueError above
        return None, f"torch.distributed._shard.sharded_tensor fails to import: {type(e).__name__}: {e}"
    return ShardedTensor, None


def _import_dtensor():
    """torch's DTensor class and its local-box helper, or the reason they are absent."""
    for module in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            mod = __import__(module, fromlist=["DTensor"])
            cls = mod.DTensor
        except Exception:
            continue
        for utils in (module + "._utils", "torch.distributed._tensor._utils"):
            try:
                helper = __import__(utils, fromlist=["x"]).compute_local_shape_and_global_offset
            except Exception:
                continue
            return (cls, helper), None
        return None, f"{module} has no compute_local_shape_and_global_offset"
    return None, f"torch {torch.__version__} has no DTensor"


_SHARDED_TENSOR, _SHARDED_TENSOR_WHY = _import_sharded_tensor()
_DTENSOR, _DTENSOR_WHY = _import_dtensor()

#: The distributed tensor types this torch cannot provide, each with the reason:
#: ``{"ShardedTensor": "...", "DTensor": "..."}`` (empty when both are supported).
unavailable = {name: why for name, why in (("ShardedTensor", _SHARDED_TENSOR_WHY),
                                           ("DTensor", _DTENSOR_WHY)) if why}


def _local_shard_of_sharded_tensor(key, st):
    shards = st.local_shards()
    if len(shards) != 1:
        raise InvalidArgumentError(
            f"tensor '{key}': a ShardedTensor with {len(shards)} local shards on this rank "
            "(ckptdb takes one box per key and rank)")
    meta = shards[0].metadata
    return Shard(shards[0].tensor, tuple(st.size()), tuple(meta.shard_offsets))


def _local_shard_of_dtensor(key, dt):
    _, compute = _DTENSOR
    local = dt.to_local()
    shape, offset = compute(dt.shape, dt.device_mesh, dt.placements)
    if tuple(local.shape) != tuple(shape):
        raise InvalidArgumentError(
            f"tensor '{key}': DTensor local shape {tuple(local.shape)} is not its box "
            f"{tuple(shape)} (uneven or partial placements are not supported)")
    return Shard(local, tuple(dt.shape), tuple(offset))


def _leaf(key, value):
    """A model state dict entry as ckptdb takes it: distributed tensors as Shards."""
    if _SHARDED_TENSOR is not None and isinstance(value, _SHARDED_TENSOR):
        return _local_shard_of_sharded_tensor(key, value)
    if _DTENSOR is not None and isinstance(value, _DTENSOR[0]):
        return _local_shard_of_dtensor(key, value)
    return value


def _unwrapped(model):
    """The module a data-parallel wrapper (DistributedDataParallel, DataParallel)
    holds, or `model` itself: the state dict's keys are the module's own, as
    torch.distributed.checkpoint's are, so that a checkpoint of a wrapped model
    loads into the bare one and back."""
    wrappers = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    while isinstance(model, wrappers):
        model = model.module
    return model


def _model_state(model):
    """model.state_dict() (tensors detached, sharing the parameters' memory) with
    distributed tensors as Shards."""
    return {key: _leaf(key, value) for key, value in model.state_dict().items()}


def _names_of_parameters(model):
    """id(parameter) -> its fully qualified name (the first one for a shared parameter)."""
    return {id(param): name for name, param in model.named_parameters()}


def _optimizer_parameters(model, optimizer):
    """[(group index, fqn, parameter)] of every parameter the optimizer updates."""
    names = _names_of_parameters(model)
    out = []
    for g, group in enumerate(optimizer.param_groups):
        for param in group["params"]:
            if id(param) not in names:
                raise InvalidArgumentError(
                    f"the optimizer's param_groups[{g}] holds a parameter of shape "
                    f"{tuple(param.shape)} that is not a parameter of the model")
            out.append((g, names[id(param)], param))
    return out


class _FirstValues(dict):
    """One parameter's optimizer state that keeps each entry as it was first set:
    the value the optimizer starts from, before its first step updates it (the
    step counter 0, Adam's zero moments, Rprop's step sizes of lr, ASGD's eta)."""

    def __init__(self):
        super().__init__()
        self.first = {}

    def __setitem__(self, key, value):
        if key not in self.first:
            keep = value.clone() if torch.is_tensor(value) and not value.is_meta else value
            self.first[key] = keep
        super().__setitem__(key, value)


def _step_capturing_first_values(optimizer, params):
    """Steps `optimizer` (gradients of `params` set by the caller) with an empty
    _FirstValues as each parameter's state; returns {param: its _FirstValues}."""
    states = {}
    for p in params:
        states[p] = optimizer.state[p] = _FirstValues()
    optimizer.step()
    return states


def _zero_step(optimizer, params):
    """The state a fresh `optimizer` starts from, for `params`: one real step with
    zero gradients for them (and none for the others, so that the step leaves
    their state alone), with the optimizer's own hyper-parameters (a first
    state may start from them: Rprop's step sizes of lr, ASGD's eta); then every
    entry set back to its first value (_FirstValues), and the parameters back to
    their values (a step with zero gradients still moves them by weight decay):
    they are copied aside for the step, which costs one copy of them for the
    call (less than the state the optimizer's first step will make). Gradients
    are restored after it."""
    stepped = set(params)
    every = [p for group in optimizer.param_groups for p in group["params"]]
    grads = [(p, p.grad) for p in every]
    for p in every:
        p.grad = torch.zeros_like(p) if p in stepped else None
    kept = [(p, p.detach().clone(memory_format=torch.preserve_format)) for p in params]
    try:
        states = _step_capturing_first_values(optimizer, params)
    except Exception as e:
        for p in params:
            optimizer.state.pop(p, None)
        raise InvalidArgumentError(
            f"cannot create the state of a fresh {type(optimizer).__name__} for the state "
            f"dict (one step with zero gradients failed: {type(e).__name__}: {e}); step the "
            "optimizer once before get_state_dict") from e
    finally:
        with torch.no_grad():
            for p, value in kept:
                p.copy_(value)
        for p, grad in grads:
            p.grad = grad
    for p, state in states.items():
        for key, first in state.first.items():
            now = state[key]
            if torch.is_tensor(now) and torch.is_tensor(first) and now.shape == first.shape:
                now.copy_(first)  # the tensor the optimizer holds, set back
            else:
                state[key] = first
        optimizer.state[p] = dict(state)


def _filled_for(param, like, fill):
    """`fill` in a tensor on `param`'s device with the shape, strides and dtype
    of `like` (the meta tensor the optimizer made: zeros_like(p) keeps `p`'s
    memory format, Rprop's step sizes do not)."""
    out = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=param.device)
    return out.fill_(fill)


def _shadow_groups(optimizer, stand_in):
    """The optimizer's param groups over stand-ins of its parameters
    (`stand_in(p)`, None for a parameter that does not step), with their own
    hyper-parameters; returns (groups, [(param, stand-in)])."""
    pairs, groups = [], []
    for group in optimizer.param_groups:
        copies = []
        for p in group["params"]:
            copy = stand_in(p)
            copies.append(copy)
            pairs.append((p, copy))
        shadow = {k: v for k, v in group.items() if k != "params"}
        shadow["params"] = copies
        groups.append(shadow)
    return groups, pairs


def _torch_step_class(optimizer):
    """The class of torch's own optimizers (torch.optim.*) whose step `optimizer`
    takes: its own, or the one it inherits its step from (a subclass with a
    constructor of its own, say); None for an optimizer with a step of its own."""
    def unwrapped(step):
        # torch wraps a class's step for its profiler when the first instance
        # is made (the subclass's own attribute then), keeping it as __wrapped__.
        while hasattr(step, "__wrapped__"):
            step = step.__wrapped__
        return step

    for cls in type(optimizer).__mro__:
        if cls.__module__.startswith("torch.optim.") and cls is not torch.optim.Optimizer:
            same = unwrapped(type(optimizer).step) is unwrapped(cls.step)
            return cls if same else None
    return None


def _shadow_first_values(optimizer, wanted, stand_in):
    """{param: _FirstValues} of a copy of `optimizer` (as the torch optimizer whose
    step it takes) stepped over stand-ins of the `wanted` parameters (each with a
    gradient like itself), or None where the copy cannot be made or stepped."""
    def with_grad(p):
        copy = stand_in(p)
        copy.grad = torch.empty_like(copy).zero_() if p in wanted else None
        return copy

    groups, pairs = _shadow_groups(optimizer, with_grad)
    try:
        shadow = _torch_step_class(optimizer)(groups, **optimizer.defaults)
        states = _step_capturing_first_values(
            shadow, [copy for p, copy in pairs if p in wanted])
    except Exception:  # an op without a meta kernel, arguments it does not take
        return None
    return {p: states[copy] for p, copy in pairs if p in wanted}


def _meta_stand_in(p):
    """A stand-in of parameter `p` for a step that gives each state tensor's
    shape and dtype: a meta-device tensor, or for a 0-d parameter a real one
    (its state is as small): optimizers index 0-d tensors with masks (Rprop),
    which needs a value the meta device does not have."""
    return torch.empty_like(p, device="meta") if p.dim() else torch.zeros_like(p)


def _meta_step_state(optimizer, params):
    """The state a fresh one of torch's own optimizers starts from, without a
    step over the parameters' bytes: its first step run on a copy of the
    optimizer over meta-device parameters (no memory, no arithmetic) gives each
    entry's first value and each state tensor's shape and dtype; the same step
    over one-element parameters gives the value each state tensor starts filled
    with (zeros, Rprop's lr). A subclass that inherits its step (a constructor of
    its own) is copied as that torch optimizer. Returns {param: state dict}, or
    None where this optimizer cannot be copied so."""
    if _torch_step_class(optimizer) is None:
        return None  # a step of its own: only a real step is safe
    wanted = set(params)
    shapes = _shadow_first_values(optimizer, wanted, _meta_stand_in)
    fills = _shadow_first_values(
        optimizer, wanted,
        lambda p: torch.zeros((1,) * p.dim(), dtype=p.dtype, device=p.device))
    if shapes is None or fills is None:
        return None
    out = {}
    for p in params:
        made, tiny = shapes[p].first, fills[p].first
        if not made or set(made) != set(tiny):
            return None
        state = {}
        for k, v in made.items():
            if not (torch.is_tensor(v) and v.is_meta):
                state[k] = v
                continue
            t = tiny[k]
            if not torch.is_tensor(t) or t.numel() > 1:
                return None
            state[k] = _filled_for(p, v, t.reshape(-1)[0].item() if t.numel() else 0)
        out[p] = state
    return out


def _init_optimizer_state(optimizer, params):
    """Creates the per-parameter state a fresh optimizer creates lazily on its first
    step (as torch.distributed.checkpoint needs too), so that a load has state
    tensors to fill, with the values a fresh optimizer starts from, so that
    training on from it is training a fresh optimizer: for torch's own
    optimizers from their step on stand-in copies (see _meta_step_state), for
    others from one real zero-gradient step with a learning rate of 0, set back.
    Frozen parameters get none, as in training. Parameters, gradients and
    learning rates are unchanged."""
    # A frozen parameter (requires_grad False) never steps, so a trained
    # optimizer has no state for it either (torch.distributed.checkpoint's rule).
    missing = [p for p in params if p.requires_grad and not optimizer.state.get(p)]
    if not missing:
        return
    made = _meta_step_state(optimizer, missing)
    if made is None:
        try:
            _zero_step(optimizer, missing)
        except InvalidArgumentError:
            # A stepped optimizer that keeps no state for some parameters
            # (LBFGS keeps all of it under its first one) and cannot step
            # without a closure: those have none, as in its own state_dict.
            if not any(optimizer.state.get(p) for p in params):
                raise
        return
    for p, state in made.items():
        optimizer.state[p] = state


def _optimizer_state(model, optimizer):
    entries = _optimizer_parameters(model, optimizer)
    _init_optimizer_state(optimizer, [p for _, _, p in entries])
    # The optimizer's own tensors, in copies of its per-parameter dicts (and of
    # the lists in them, LBFGS's history): a load fills the tensors in place,
    # and replacing an entry (a Shard marking a tensor-parallel slice, a small
    # value a load gives back) leaves the optimizer as it is until
    # set_state_dict, instead of putting a Shard where its step expects a tensor.
    state = {fqn: _containers_copied(optimizer.state[p])
             for _, fqn, p in entries if optimizer.state.get(p)}
    # Each parameter with its group's hyper-parameters (a dict of its own): ranks
    # whose optimizers hold different parameters (pipeline stages) store theirs
    # under their own keys, and replicas store equal values under the same ones.
    hyper = [{k: v for k, v in group.items() if k != "params"}
             for group in optimizer.param_groups]
    groups = {fqn: dict(hyper[g]) for g, fqn, _ in entries}
    # A group without parameters (yet) keeps its hyper-parameters by its index.
    for g, group in enumerate(optimizer.param_groups):
        if not group["params"]:
            groups[_empty_group_key(g)] = dict(hyper[g])
    return {"state": state, "param_groups": groups}


def _containers_copied(value):
    """`value` with each dict and list in it copied; tensors and other leaves
    are the same objects."""
    if isinstance(value, dict):
        return {k: _containers_copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_containers_copied(v) for v in value]
    return value


def _empty_group_key(g):
    """The key of param group `g`'s hyper-parameters when it holds no parameters:
    no parameter's name (names are dotted identifiers)."""
    return f"(group {g}, no parameters)"


def get_state_dict(model, optimizer=None):
    """``{"model": ..., "optim": ...}`` ("optim" only with an optimizer).

    "model" is ``model.state_dict()`` with ``ShardedTensor`` / ``DTensor`` leaves
    as :class:`ckptdb.Shard` objects of their local shards. "optim" is
    ``{"state": {fqn: {name: tensor or value}}, "param_groups": {fqn: {hyper-parameters
    of its group}}}``: each parameter with its group's hyper-parameters, so that ranks
    whose optimizers hold different parameters (pipeline stages) keep theirs (a group
    without parameters under ``"(group i, no parameters)"``). An optimizer that has not
    stepped yet gets its state created first, with the values a fresh optimizer starts from (step 0,
    zero moments), so that the dict can be a load target and training on without
    a load is training the fresh optimizer (torch's own optimizers run their first
    step on stand-in copies of the parameters; others one step with zero
    gradients and a learning rate of 0, whose state is then set back). The keys
    of a model wrapped in ``DistributedDataParallel`` or ``DataParallel`` are the
    wrapped module's. Every tensor is the model's or the optimizer's own (shared,
    not copied), in dicts and lists of the call's own: replacing an entry (with a
    Shard of a tensor-parallel slice, or by a load's small values) changes the
    optimizer only through set_state_dict. The hyper-parameters in "param_groups"
    are copied at the call, so call it again before a save when a scheduler
    changes them."""
    _check_arguments(model, optimizer)
    model = _unwrapped(model)
    out = {"model": _model_state(model)}
    if optimizer is not None:
        out["optim"] = _optimizer_state(model, optimizer)
    return out


def _check_arguments(model, optimizer):
    """InvalidArgumentError unless `model` looks like a torch module and `optimizer` is
    None or looks like an optimizer (anything else failed deep inside with a bare
    AttributeError). By what they have, so that wrappers that are not subclasses pass."""
    if not all(hasattr(model, a) for a in ("state_dict", "named_parameters")):
        raise InvalidArgumentError(
            f"model must be a torch.nn.Module, got {type(model).__name__}")
    if optimizer is not None and not all(
            hasattr(optimizer, a) for a in ("state_dict", "param_groups", "state")):
        raise InvalidArgumentError(
            f"optimizer must be a torch optimizer or None, got {type(optimizer).__name__}")


def _model_copies(model, state, strict):
    """The entries of `state` to copy into the model: those that are not already
    its own memory (what db.load filled in place needs nothing more). Raises
    InvalidArgumentError, before anything is set, for keys the model lacks,
    (`strict`) keys of the model that `state` lacks, and tensors whose shape is
    not the model's."""
    current = model.state_dict()
    unknown = sorted(set(state) - set(current), key=str)
    if unknown:
        raise InvalidArgumentError(f"state['model'] has keys the model lacks: {unknown[:5]}")
    missing = sorted(set(current) - set(state), key=str)
    if strict and missing:
        raise InvalidArgumentError(
            f"state['model'] lacks {len(missing)} key(s) of the model: {missing[:5]}; nothing "
            "was set (strict=False leaves them as they are)")
    copies = {}
    for key, value in state.items():
        if isinstance(value, Shard):
            continue  # the local shard of a distributed tensor, filled in place
        mine = current[key]
        if torch.is_tensor(mine) and not torch.is_tensor(value):
            # An array or a nested list becomes a tensor now, so that its shape
            # is checked with the others before anything is set.
            try:
                value = torch.as_tensor(value)
            except (TypeError, ValueError, RuntimeError) as e:
                raise InvalidArgumentError(
                    f"state['model'][{key!r}] is a {type(value).__name__}, not a tensor or an "
                    f"array ({e}); nothing was set") from e
        if torch.is_tensor(value) and torch.is_tensor(mine):
            if value.data_ptr() == mine.data_ptr() and value.shape == mine.shape and \
                    value.stride() == mine.stride():
                continue
            if value.shape != mine.shape:
                raise InvalidArgumentError(
                    f"state['model'][{key!r}] has shape {list(value.shape)} where the model's "
                    f"is {list(mine.shape)}; nothing was set")
        copies[key] = value
    return copies


def _set_model(model, copies):
    if copies:
        try:
            model.load_state_dict(copies, strict=False)
        except RuntimeError as e:  # what the checks before cannot see, named by torch
            raise InvalidArgumentError(f"state['model']: {e}") from e


def _group_index(optimizer, names, saved, i):
    """The optimizer's param group that holds the parameters `saved` lists."""
    wanted = set(saved.get("params", []))
    for g, group in enumerate(optimizer.param_groups):
        have = {names.get(id(p)) for p in group["params"]}
        if wanted == have:
            return g
    raise InvalidArgumentError(
        f"state['optim']['param_groups'][{i}] lists parameters {sorted(wanted)[:5]}... that "
        "no param group of the optimizer has")


def _check_optimizer_state(state):
    """InvalidArgumentError unless `state` (state['optim']) has the structure
    get_state_dict gives, {"state": {fqn: dict}, "param_groups": {fqn: dict}}, or
    param_groups as a list of dicts with lists of names under "params" (the
    layout before per-parameter hyper-parameters); either part optional."""
    def refuse(where, what, value):
        raise InvalidArgumentError(
            f"state['optim']{where} must be {what}, got {type(value).__name__}")

    if not isinstance(state, dict):
        refuse("", "a dict", state)
    per_param = state.get("state", {})
    if not isinstance(per_param, dict):
        refuse("['state']", "a dict of parameter names to dicts", per_param)
    for fqn, values in per_param.items():
        if not isinstance(values, dict):
            refuse(f"['state'][{fqn!r}]", "a dict", values)
    groups = state.get("param_groups", {})
    if isinstance(groups, dict):  # by parameter name
        for fqn, group in groups.items():
            if not isinstance(group, dict):
                refuse(f"['param_groups'][{fqn!r}]", "a dict", group)
        return
    if not isinstance(groups, (list, tuple)):
        refuse("['param_groups']", "a dict of parameter names to dicts (or a list of dicts)",
               groups)
    for i, group in enumerate(groups):
        if not isinstance(group, dict):
            refuse(f"['param_groups'][{i}]", "a dict", group)
        params = group.get("params", [])
        if not isinstance(params, (list, tuple)) or not all(isinstance(n, str) for n in params):
            refuse(f"['param_groups'][{i}]['params']", "a list of parameter names", params)


def _optimizer_plan(model, optimizer, state):
    """What setting `state` (state['optim']) into `optimizer` changes, checked
    before anything is set: ({param: its new state dict}, [(param group, its
    hyper-parameters)]). Raises InvalidArgumentError for parameters the
    optimizer lacks, a state tensor whose shape is not that of the tensor the
    optimizer holds under its name, and hyper-parameters that do not fit the
    optimizer's groups."""
    _check_optimizer_state(state)
    entries = _optimizer_parameters(model, optimizer)
    by_name = {fqn: p for _, fqn, p in entries}
    unknown = sorted(set(state.get("state", {})) - set(by_name), key=str)
    if unknown:
        raise InvalidArgumentError(
            f"state['optim']['state'] has parameters the optimizer lacks: {unknown[:5]}")
    per_param = {}
    saved = state.get("state", {})
    fresh = _fresh_state_like(optimizer, [by_name[fqn] for fqn, values in saved.items()
                                          if values and not optimizer.state.get(by_name[fqn])])
    for fqn, values in saved.items():
        p = by_name[fqn]
        held = optimizer.state.get(p) or {}
        if held is values:
            continue
        # Tensors shared, not copied; a Shard's data is the tensor it filled.
        new = {k: v.data if isinstance(v, Shard) else v for k, v in values.items()}
        # An optimizer that has not stepped holds no state: its tensors are
        # those a fresh one of its kind would make (torch's own optimizers).
        like, whose = (held, "the optimizer's") if held else (
            fresh.get(p, {}), f"a fresh {type(optimizer).__name__}'s")
        for k, v in new.items():
            mine = like.get(k)
            if torch.is_tensor(v) and torch.is_tensor(mine) and v.shape != mine.shape:
                raise InvalidArgumentError(
                    f"state['optim']['state'][{fqn!r}][{k!r}] has shape {list(v.shape)} where "
                    f"{whose} is {list(mine.shape)} (parameter of shape "
                    f"{list(p.shape)}); nothing was set")
            new[k] = _cast_as_torch_does(p, k, v)
        per_param[p] = new
    groups = state.get("param_groups", {})
    if isinstance(groups, dict):
        return per_param, _groups_by_parameter(optimizer, entries, groups)
    names = _names_of_parameters(model)
    hyper = [(optimizer.param_groups[_group_index(optimizer, names, saved, i)],
              {k: v for k, v in saved.items() if k != "params"})
             for i, saved in enumerate(groups)]
    return per_param, hyper


def _fresh_state_like(optimizer, params):
    """{param: {key: meta tensor}}: the shapes and dtypes of the state tensors a
    fresh `optimizer` makes for `params` on its first step, from that step on
    meta-device stand-ins of one of torch's own optimizers (no memory, no
    arithmetic); {} for an optimizer with a step of its own, or none to make."""
    if not params or _torch_step_class(optimizer) is None:
        return {}
    made = _shadow_first_values(optimizer, set(params), _meta_stand_in)
    if made is None:
        return {}
    return {p: {k: v for k, v in state.first.items() if torch.is_tensor(v)}
            for p, state in made.items()}


def _cast_as_torch_does(param, key, value):
    """A state tensor as torch's Optimizer.load_state_dict keeps it: on the
    parameter's device, and, for a floating-point parameter, in its dtype (but
    the step counter). A copy only where either differs; anything else as it is."""
    if not torch.is_tensor(value):
        return value
    if param.is_floating_point() and key != "step" and value.dtype != param.dtype:
        value = value.to(dtype=param.dtype)
    return value.to(device=param.device)


def _set_optimizer(optimizer, plan):
    per_param, hyper = plan
    for p, values in per_param.items():
        optimizer.state[p] = values
    for group, values in hyper:
        group.update(values)


def _equal_values(x, y):
    """Whether two hyper-parameter values are equal: tensors (a capturable
    optimizer's lr) and arrays by value, anything else by ==."""
    if torch.is_tensor(x) or torch.is_tensor(y):
        return torch.is_tensor(x) and torch.is_tensor(y) and torch.equal(x, y)
    try:
        equal = x == y
        return bool(equal.all()) if hasattr(equal, "all") else bool(equal)
    except Exception:  # values that do not compare
        return x is y


def _same_hyper_parameters(a, b):
    """Whether two parameters' saved hyper-parameters are equal."""
    return set(a) == set(b) and all(_equal_values(a[k], b[k]) for k in a)


def _groups_by_parameter(optimizer, entries, groups):
    """Each param group's hyper-parameters from `groups` ({fqn: hyper-parameters},
    get_state_dict's layout), as [(group, hyper-parameters)]: those of its
    parameters, which must agree (a group whose parameters had different
    hyper-parameters when saved cannot take them)."""
    known = {fqn for _, fqn, _ in entries}
    known.update(_empty_group_key(g) for g, group in enumerate(optimizer.param_groups)
                 if not group["params"])
    unknown = sorted(set(groups) - known, key=str)
    if unknown:
        raise InvalidArgumentError(
            f"state['optim']['param_groups'] has parameters the optimizer lacks: {unknown[:5]}")
    out = []
    for g, group in enumerate(optimizer.param_groups):
        saved = [(fqn, groups[fqn]) for gi, fqn, _ in entries if gi == g and fqn in groups]
        if not group["params"] and _empty_group_key(g) in groups:
            saved = [(_empty_group_key(g), groups[_empty_group_key(g)])]
        # The optimizer's own parameters stay whatever a saved dict lists.
        saved = [(fqn, {k: v for k, v in hyper.items() if k != "params"})
                 for fqn, hyper in saved]
        if not saved:
            continue
        first_fqn, first = saved[0]
        for fqn, other in saved[1:]:
            if not _same_hyper_parameters(first, other):
                differ = sorted((k for k in set(first) | set(other)
                                 if not _equal_values(first.get(k), other.get(k))), key=str)
                raise InvalidArgumentError(
                    f"the optimizer's param_groups[{g}] holds '{first_fqn}' and '{fqn}', "
                    f"whose saved hyper-parameters differ in {differ[:5]}: group the "
                    "parameters as they were grouped when saved")
        out.append((group, first))
    return out


def set_state_dict(model, optimizer, state, *, strict=True):
    """Puts ``state`` (from :func:`get_state_dict`, after ``db.load(state)``) into the
    model and the optimizer (``None``: the model only). Tensors that the load filled
    in place are not copied again; the optimizer's hyper-parameters are set from
    ``param_groups``, each group's from its parameters' (or, in a list of groups,
    matched to its groups by their parameters' names). Raises
    :class:`ckptdb.InvalidArgumentError`, having set nothing, naming keys the model
    or optimizer lacks, keys of the model that ``state['model']`` lacks (unless
    ``strict=False``, which leaves those as they are), and tensors whose shapes
    differ from the model's or the optimizer's."""
    _check_arguments(model, optimizer)
    model = _unwrapped(model)
    if not isinstance(state, dict):
        raise InvalidArgumentError(f"state must be a dict, got {type(state).__name__}")
    if not isinstance(strict, bool):
        raise InvalidArgumentError(f"strict must be a bool, got {type(strict).__name__}")
    copies = None
    if "model" in state:
        if not isinstance(state["model"], dict):
            raise InvalidArgumentError(
                f"state['model'] must be a dict, got {type(state['model']).__name__}")
        copies = _model_copies(model, state["model"], strict)
    plan = None
    if optimizer is not None and "optim" in state:
        plan = _optimizer_plan(model, optimizer, state["optim"])
    if copies is not None:
        _set_model(model, copies)
    if plan is not None:
        _set_optimizer(optimizer, plan)
