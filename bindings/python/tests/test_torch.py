"""PyTorch state as a training loop has it (a user's first try) and the
ckptdb.torch helpers (docs/api.md "PyTorch helpers"). Skipped, saying why, only where
torch is not installed."""
import copy
import os
import subprocess
import sys

import numpy as np
import pytest

import ckptdb

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
nn = torch.nn


def transformer(seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def train(model, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(3, 5, 16, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def assert_same_state(a, b):
    """Equal nested optimizer/model state: same keys, key types, containers, values."""
    assert type(a) is type(b) or (isinstance(a, dict) and isinstance(b, dict)), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same_state(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_state(x, y)
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a == b


def test_first_try_transformer_and_adamw_state_dicts_round_trip(tmp_path):
    # A first try: model.state_dict() and opt.state_dict() as they are.
    model = transformer(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train(model, opt, 3)
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 3}, step=3)

        other = transformer(7)
        other_opt = torch.optim.AdamW(other.parameters(), lr=5e-1)
        train(other, other_opt, 1, seed=9)  # its state exists, with other values
        target = {"model": other.state_dict(), "optim": other_opt.state_dict(), "step": 0}
        db.load(target)
    assert target["step"] == 3
    assert_same_state(target["optim"], opt.state_dict())
    assert isinstance(target["optim"]["param_groups"][0]["betas"], tuple)
    assert set(target["optim"]["state"]) == set(range(len(list(model.parameters()))))
    other_opt.load_state_dict(target["optim"])
    assert_same_state(other.state_dict(), model.state_dict())  # filled in place
    assert_same_state(other_opt.state_dict(), opt.state_dict())
    train(model, opt, 2, seed=5)
    train(other, other_opt, 2, seed=5)
    assert_same_state(other.state_dict(), model.state_dict())  # bit-exact continuation


class TwoLayers(nn.Module):
    """Parameters created in either order: the optimizer's indexes differ, FQNs do not."""

    def __init__(self, reverse):
        super().__init__()
        if reverse:
            self.b = nn.Linear(6, 2)
            self.a = nn.Linear(4, 6)
        else:
            self.a = nn.Linear(4, 6)
            self.b = nn.Linear(6, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def step(model, opt, seed):
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(seed))
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


def test_optimizer_state_keyed_by_fqn_loads_into_parameters_created_in_another_order(tmp_path):
    torch.manual_seed(0)
    model = TwoLayers(reverse=False)
    opt = torch.optim.AdamW([{"params": [model.a.weight, model.a.bias]},
                             {"params": [model.b.weight, model.b.bias], "lr": 0.05}], lr=0.01)
    for s in range(3):
        step(model, opt, s)
    state = ckptdb.torch.get_state_dict(model, opt)
    assert set(state["optim"]["state"]) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    groups = state["optim"]["param_groups"]
    assert set(groups) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    assert groups["b.weight"]["lr"] == groups["b.bias"]["lr"] == 0.05
    assert groups["a.weight"]["lr"] == 0.01 and "params" not in groups["a.weight"]
    # Shared, not copied.
    assert state["model"]["a.weight"].data_ptr() == model.a.weight.data_ptr()
    assert state["optim"]["state"]["b.bias"]["exp_avg"] is opt.state[model.b.bias]["exp_avg"]
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(state, step=3)
        assert db.metadata()["flat_mapping"]["optim.param_groups.b.bias.lr"] == [
            "optim", "param_groups", "b.bias", "lr"]

        torch.manual_seed(1)
        other = TwoLayers(reverse=True)
        other_opt = torch.optim.AdamW([{"params": [other.b.weight, other.b.bias], "lr": 0.5},
                                       {"params": [other.a.weight, other.a.bias]}], lr=0.9)
        before = [p.detach().clone() for p in other.parameters()]
        target = ckptdb.torch.get_state_dict(other, other_opt)  # creates the optimizer's state
        assert all(torch.equal(p, q) for p, q in zip(other.parameters(), before))
        db.load(target)
    ckptdb.torch.set_state_dict(other, other_opt, target)
    for name in ("a.weight", "a.bias", "b.weight", "b.bias"):
        assert torch.equal(other.get_parameter(name), model.get_parameter(name))
        mine, theirs = other_opt.state[other.get_parameter(name)], opt.state[model.get_parameter(name)]
        assert set(mine) == set(theirs)
        for k in mine:
            assert torch.equal(mine[k], theirs[k]), (name, k)
    assert other_opt.param_groups[0]["lr"] == 0.05 and other_opt.param_groups[1]["lr"] == 0.01
    step(model, opt, 10)
    step(other, other_opt, 10)
    for name in ("a.weight", "a.bias", "b.weight", "b.bias"):
        assert torch.equal(other.get_parameter(name), model.get_parameter(name))


class OwnAdam(torch.optim.Adam):
    """An optimizer outside torch.optim, with a constructor of its own."""

    def __init__(self, params, scale):
        super().__init__(params, lr=0.01 * scale)


class OwnRprop(torch.optim.Rprop):
    """An optimizer outside torch.optim whose first state starts from its lr."""

    def __init__(self, params, lr):
        super().__init__(params, lr=lr, etas=(0.4, 1.3))


class OwnStepRprop(OwnRprop):
    """One with a step of its own: its state comes from a real step."""

    def step(self, closure=None):
        return super().step(closure)


class DecayingSGD(torch.optim.SGD):
    """A subclass with a constructor of its own: momentum and weight decay."""

    def __init__(self, params):
        super().__init__(params, lr=0.1, momentum=0.9, weight_decay=0.1)


OPTIMIZERS = {
    "adamw-amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.1, amsgrad=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=0.1),
    "radam": lambda ps: torch.optim.RAdam(ps, lr=0.1),
    "adamax": lambda ps: torch.optim.Adamax(ps, lr=0.1),
    "adadelta": lambda ps: torch.optim.Adadelta(ps, lr=0.5),
    "asgd": lambda ps: torch.optim.ASGD(ps, lr=0.1, t0=1),
    "rprop": lambda ps: torch.optim.Rprop(ps, lr=0.05),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.1, momentum=0.5, centered=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, initial_accumulator_value=0.5),
    "own-class": lambda ps: OwnAdam(ps, 3),
    "own-rprop": lambda ps: OwnRprop(ps, lr=0.05),
    "own-step-rprop": lambda ps: OwnStepRprop(ps, lr=0.05),
    "own-class-sgd-weight-decay": DecayingSGD,
}


class ScaledConvnet(nn.Module):
    """A small convnet and a 0-d parameter that scales its output."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
        self.net[0].to(memory_format=torch.channels_last)
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.net(x) * self.scale


def small_convnet(seed):
    torch.manual_seed(seed)
    return ScaledConvnet()


def convnet_steps(model, opt, steps):
    g = torch.Generator().manual_seed(11)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(2, 3, 6, 6, generator=g)).pow(2).sum().backward()
        opt.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_fresh_optimizers_created_state_trains_on_as_the_fresh_optimizer_would(name):
    # The state get_state_dict creates for a load target is the state a fresh
    # optimizer starts from: training on from it (no load) is bit for bit
    # training the untouched optimizer, step counters and bias corrections included.
    make = OPTIMIZERS[name]
    model, reference = small_convnet(3), small_convnet(3)
    opt, untouched = make(model.parameters()), make(reference.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    state = ckptdb.torch.get_state_dict(model, opt)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())
    assert [g["lr"] for g in opt.param_groups] == [opt.defaults["lr"]]
    created = {n: dict(opt.state[p]) for n, p in model.named_parameters()}
    convnet_steps(model, opt, 3)
    convnet_steps(reference, untouched, 3)
    for (n, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), n
        mine, theirs = opt.state[p], untouched.state[q]
        assert set(created[n]) == set(theirs), n  # every entry there to load into
        # The optimizer's own tensors (in a dict of the call's own).
        target = state["optim"]["state"][n]
        assert set(target) == set(mine), n
        assert all(target[k] is v for k, v in mine.items() if torch.is_tensor(v)), n
        for k, v in theirs.items():
            if torch.is_tensor(v):
                assert mine[k].dtype == v.dtype and mine[k].stride() == v.stride(), (n, k)
                assert torch.equal(mine[k], v), (n, k)
            else:
                assert mine[k] == v, (n, k)


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.LBFGS(ps),
    lambda ps: torch.optim.SparseAdam(ps),
], ids=["lbfgs", "sparse-adam"])
def test_an_optimizer_whose_state_cannot_be_created_raises_invalid_argument(make):
    model = TwoLayers(reverse=False)
    opt = make(list(model.parameters()))
    with pytest.raises(ckptdb.InvalidArgumentError, match="step the optimizer once"):
        ckptdb.torch.get_state_dict(model, opt)
    assert not any(opt.state.get(p) for p in model.parameters())
    assert all(p.grad is None for p in model.parameters())


def test_marking_optimizer_state_as_shards_leaves_the_optimizer_stepping(tmp_path):
    # The tensor-parallel pattern: each rank replaces its optimizer state tensors in the dict
    # get_state_dict gave by Shards of their slice. The optimizer keeps its tensors (its next
    # step would meet a Shard otherwise), and the Shards still share their memory.
    torch.manual_seed(0)
    model = TwoLayers(reverse=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    step(model, opt, 0)
    state = ckptdb.torch.get_state_dict(model, opt)
    per_param = state["optim"]["state"]["a.weight"]
    for k, v in list(per_param.items()):
        if v.dim() == 2:
            per_param[k] = ckptdb.Shard(v, (6, 4), (0, 0))
    held = opt.state[model.a.weight]
    assert torch.is_tensor(held["exp_avg"]) and torch.is_tensor(held["exp_avg_sq"])
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(state, step=1)
        assert db.metadata()["tensors"]["optim.state.a.weight.exp_avg"]["global_shape"] == [6, 4]
    step(model, opt, 1)
    assert per_param["exp_avg"].data.data_ptr() == held["exp_avg"].data_ptr()


def test_a_load_replaces_small_values_in_the_optimizer_only_through_set_state_dict(tmp_path):
    # LBFGS keeps ints and lists of tensors: the load target's copies take the stored ones,
    # set_state_dict gives them to the optimizer.
    model = TwoLayers(reverse=False)
    opt = torch.optim.LBFGS(model.parameters(), history_size=3)
    lbfgs_steps(model, opt, 2, seed=1)
    saved = ckptdb.torch.get_state_dict(model, opt)
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(saved, step=2)
        other = TwoLayers(reverse=False)
        other_opt = torch.optim.LBFGS(other.parameters(), history_size=3)
        lbfgs_steps(other, other_opt, 2, seed=2)
        target = ckptdb.torch.get_state_dict(other, other_opt)
        held = other_opt.state[other.a.weight]
        n_iter, dirs = held["n_iter"], held["old_dirs"]
        target["optim"]["state"]["a.weight"]["n_iter"] = -7
        assert held["n_iter"] == n_iter
        db.load(target)
        assert held["old_dirs"] is dirs
    ckptdb.torch.set_state_dict(other, other_opt, target)
    loaded = other_opt.state[other.a.weight]
    assert loaded["n_iter"] == saved["optim"]["state"]["a.weight"]["n_iter"]
    assert all(torch.equal(x, y) for x, y in
               zip(loaded["old_dirs"], saved["optim"]["state"]["a.weight"]["old_dirs"]))


def lbfgs_steps(model, opt, steps, seed):
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed))

    def closure():
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)


def test_a_stepped_lbfgs_saves_and_resumes_with_the_state_it_keeps(tmp_path):
    # LBFGS keeps all of its state under its first parameter and cannot step without a
    # closure: once stepped, the other parameters have no state, as in its own state_dict.
    torch.manual_seed(5)
    model = TwoLayers(reverse=False)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1)
    lbfgs_steps(model, opt, 3, seed=1)
    state = ckptdb.torch.get_state_dict(model, opt)
    assert list(state["optim"]["state"]) == ["a.weight"]
    assert "old_dirs" in state["optim"]["state"]["a.weight"]
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(state, step=3)
        # A target of the same structure (its history lists grow with the steps taken), with
        # every tensor and number changed.
        torch.manual_seed(5)
        other = TwoLayers(reverse=False)
        other_opt = torch.optim.LBFGS(other.parameters(), lr=0.1)
        lbfgs_steps(other, other_opt, 3, seed=1)
        with torch.no_grad():
            for p in other.parameters():
                p.add_(1.0)
        target = ckptdb.torch.get_state_dict(other, other_opt)
        kept = target["optim"]["state"]["a.weight"]
        for k, v in kept.items():
            if torch.is_tensor(v):
                v.zero_()
            elif isinstance(v, list):
                kept[k] = [x.zero_() if torch.is_tensor(x) else x for x in v]
            elif isinstance(v, int):
                kept[k] = -1
        db.load(target)
        ckptdb.torch.set_state_dict(other, other_opt, target)
    saved = state["optim"]["state"]["a.weight"]
    loaded = other_opt.state[other.a.weight]
    assert loaded["n_iter"] == saved["n_iter"] > 0
    assert all(torch.equal(x, y) for x, y in zip(loaded["old_dirs"], saved["old_dirs"]))
    lbfgs_steps(model, opt, 2, seed=3)
    lbfgs_steps(other, other_opt, 2, seed=3)
    for (name, p), q in zip(model.named_parameters(), other.parameters()):
        assert torch.equal(p, q), name


def test_a_data_parallel_model_has_the_wrapped_modules_keys(tmp_path):
    torch.manual_seed(8)
    bare = TwoLayers(reverse=False)
    opt = torch.optim.Adam(bare.parameters(), lr=0.1)
    wrapped = nn.DataParallel(bare)
    step(wrapped, opt, 0)
    state = ckptdb.torch.get_state_dict(wrapped, opt)
    assert sorted(state["model"]) == ["a.bias", "a.weight", "b.bias", "b.weight"]
    assert sorted(state["optim"]["state"]) == ["a.bias", "a.weight", "b.bias", "b.weight"]
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(state, step=1)
        torch.manual_seed(9)
        other = TwoLayers(reverse=False)
        other_opt = torch.optim.Adam(other.parameters(), lr=0.1)
        target = ckptdb.torch.get_state_dict(other, other_opt)  # the bare module
        db.load(target)
        ckptdb.torch.set_state_dict(other, other_opt, target)
        rewrapped = nn.DataParallel(other)
        again = ckptdb.torch.get_state_dict(rewrapped, other_opt)
        db.load(again)
        ckptdb.torch.set_state_dict(rewrapped, other_opt, again)
    for name, p in bare.named_parameters():
        assert torch.equal(p, other.get_parameter(name)), name


def test_only_the_parameters_without_state_get_it_created():
    torch.manual_seed(4)
    model = TwoLayers(reverse=False)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    step(model, opt, 0)
    del opt.state[model.b.weight]  # as if it joined the optimizer later
    trained = {k: v.clone() for k, v in opt.state[model.a.weight].items()}
    ckptdb.torch.get_state_dict(model, opt)
    assert set(opt.state[model.b.weight]) == {"step", "exp_avg", "exp_avg_sq"}
    assert all(torch.equal(opt.state[model.a.weight][k], v) for k, v in trained.items())


@pytest.mark.parametrize("own_class", [False, True], ids=["torch-optim", "own-class"])
def test_a_model_with_frozen_parameters_resumes_with_a_strict_load(tmp_path, own_class):
    def make(seed):
        torch.manual_seed(seed)
        model = TwoLayers(reverse=False)
        model.b.weight.requires_grad_(False)  # frozen: it never gets optimizer state
        opt = OwnAdam(model.parameters(), 10) if own_class else \
            torch.optim.Adam(model.parameters(), lr=0.1)
        return model, opt

    model, opt = make(5)
    for s in range(2):
        step(model, opt, s)
    assert model.b.weight not in opt.state
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(ckptdb.torch.get_state_dict(model, opt), step=2)
        fresh, fresh_opt = make(6)
        target = ckptdb.torch.get_state_dict(fresh, fresh_opt)
        assert "b.weight" not in target["optim"]["state"]
        db.load(target)  # strict: every requested key is in the checkpoint
    ckptdb.torch.set_state_dict(fresh, fresh_opt, target)
    step(model, opt, 7)
    step(fresh, fresh_opt, 7)
    for name, p in model.named_parameters():
        assert torch.equal(p, fresh.get_parameter(name)), name


def test_set_state_dict_copies_what_is_not_shared_and_names_unknown_keys():
    model = TwoLayers(reverse=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step(model, opt, 0)
    state = ckptdb.torch.get_state_dict(model, opt)
    state["model"] = {k: v.clone() + 1 for k, v in state["model"].items()}
    ckptdb.torch.set_state_dict(model, opt, state)
    assert torch.equal(model.a.bias, state["model"]["a.bias"])
    with pytest.raises(ckptdb.InvalidArgumentError, match="c.weight"):
        ckptdb.torch.set_state_dict(model, opt, {"model": {"c.weight": torch.zeros(1)}})
    with pytest.raises(ckptdb.InvalidArgumentError, match="z.bias"):
        ckptdb.torch.set_state_dict(model, opt, {"optim": {"state": {"z.bias": {}}}})


def snapshot(model, opt):
    """Copies of every tensor of the model's and the optimizer's state, and the groups."""
    params = {n: p.detach().clone() for n, p in model.state_dict().items()}
    state = {id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
             for p, s in opt.state.items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    return params, state, groups


def assert_unchanged(model, opt, before):
    params, state, groups = before
    for n, p in model.state_dict().items():
        assert torch.equal(p, params[n]), n
    assert {id(p) for p in opt.state} == set(state)
    for p, s in opt.state.items():
        assert set(s) == set(state[id(p)])
        for k, v in s.items():
            assert torch.equal(v, state[id(p)][k]) if torch.is_tensor(v) else v == state[id(p)][k]
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == groups


def test_set_state_dict_refuses_a_state_that_does_not_fit_and_sets_nothing():
    # Like torch's strict load_state_dict, a model key the state lacks is an error (unless
    # strict=False); so is a tensor of another shape, in the model's state or the
    # optimizer's. Each is found before anything is set: the model and the optimizer are
    # left as they were, even where the other entries would fit.
    model = TwoLayers(reverse=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    step(model, opt, 2)
    good = ckptdb.torch.get_state_dict(model, opt)
    good = {"model": {k: v.clone() + 1 for k, v in good["model"].items()},
            "optim": {"state": {n: {k: v.clone() + 1 if torch.is_tensor(v) else v
                                    for k, v in s.items()}
                                for n, s in good["optim"]["state"].items()},
                      "param_groups": {n: dict(g, lr=0.5)
                                       for n, g in good["optim"]["param_groups"].items()}}}
    before = snapshot(model, opt)

    def refused(state, match, **kw):
        with pytest.raises(ckptdb.InvalidArgumentError, match=match):
            ckptdb.torch.set_state_dict(model, opt, state, **kw)
        assert_unchanged(model, opt, before)

    missing = {"model": {k: v for k, v in good["model"].items() if k != "b.bias"},
               "optim": good["optim"]}
    refused(missing, r"lacks 1 key\(s\) of the model: \['b.bias'\]")
    shapes = {"model": dict(good["model"], **{"b.weight": torch.zeros(3, 6)}),
              "optim": good["optim"]}
    refused(shapes, r"'b.weight'\] has shape \[3, 6\] where the model's is \[2, 6\]")
    moments = {"model": good["model"],
               "optim": dict(good["optim"], state=dict(
                   good["optim"]["state"],
                   **{"a.weight": dict(good["optim"]["state"]["a.weight"],
                                       exp_avg=torch.zeros(3))}))}
    refused(moments, r"\['a.weight'\]\['exp_avg'\] has shape \[3\] where the optimizer's "
                     r"is \[6, 4\]")
    for odd in (np.zeros((3, 6), np.float32), [[0.0] * 6] * 3, "text"):
        refused({"model": dict(good["model"], **{"b.weight": odd})},
                r"'b.weight'\] (has shape \[3, 6\]|is a str, not a tensor)")
    arrays = {"model": {k: v.numpy() for k, v in good["model"].items()}}
    ckptdb.torch.set_state_dict(model, None, arrays)  # arrays of the right shapes are taken
    assert torch.equal(model.b.weight, good["model"]["b.weight"])
    ckptdb.torch.set_state_dict(model, None, {"model": {k: v.clone() for k, v in
                                                        before[0].items()}})
    ckptdb.torch.set_state_dict(model, opt, missing, strict=False)
    assert torch.equal(model.b.bias, before[0]["b.bias"])
    assert torch.equal(model.a.bias, good["model"]["a.bias"])
    assert opt.param_groups[0]["lr"] == 0.5
    with pytest.raises(ckptdb.InvalidArgumentError, match="strict must be a bool"):
        ckptdb.torch.set_state_dict(model, opt, good, strict=None)


def test_set_state_dict_checks_a_fresh_optimizer_against_the_state_it_would_make():
    # An optimizer that has not stepped holds no state to compare with: a state tensor is
    # checked against the one its first step would make, and nothing is set.
    model = TwoLayers(reverse=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    step(model, opt, 1)
    good = ckptdb.torch.get_state_dict(model, opt)
    fresh_model = TwoLayers(reverse=False)
    fresh = torch.optim.AdamW(fresh_model.parameters(), lr=0.1)
    bad = {"optim": {"state": dict(good["optim"]["state"], **{
        "a.weight": dict(good["optim"]["state"]["a.weight"], exp_avg=torch.zeros(7))})}}
    with pytest.raises(ckptdb.InvalidArgumentError,
                       match=r"\['exp_avg'\] has shape \[7\] where a fresh AdamW's is \[6, 4\]"):
        ckptdb.torch.set_state_dict(fresh_model, fresh, bad)
    assert not fresh.state
    ckptdb.torch.set_state_dict(fresh_model, fresh, {"optim": good["optim"]})
    step(fresh_model, fresh, 1)


def test_a_fresh_rprop_with_a_0d_parameter_checks_the_shapes_too():
    # Rprop indexes its state with masks, which meta-device 0-d stand-ins cannot take.
    class WithScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 2)
            self.scale = nn.Parameter(torch.tensor(1.0))

    model = WithScale()
    opt = torch.optim.Rprop(model.parameters(), lr=0.01)
    state = ckptdb.torch.get_state_dict(model, opt)
    bad = {n: dict(s) for n, s in state["optim"]["state"].items()}
    bad["l.weight"]["prev"] = torch.zeros(7)
    fresh_model = WithScale()
    fresh = torch.optim.Rprop(fresh_model.parameters(), lr=0.01)
    with pytest.raises(ckptdb.InvalidArgumentError,
                       match=r"\['prev'\] has shape \[7\] where a fresh Rprop's is \[2, 3\]"):
        ckptdb.torch.set_state_dict(fresh_model, fresh, {"optim": {"state": bad}})
    assert not fresh.state


def test_set_state_dict_casts_optimizer_state_to_the_parameters_dtype_as_torch_does():
    model = TwoLayers(reverse=False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    step(model, opt, 1)
    state = ckptdb.torch.get_state_dict(model, opt)
    wide = {n: {k: v.double() if torch.is_tensor(v) else v for k, v in s.items()}
            for n, s in state["optim"]["state"].items()}
    other = TwoLayers(reverse=False)
    other_opt = torch.optim.AdamW(other.parameters(), lr=0.1)
    ckptdb.torch.set_state_dict(other, other_opt, {"optim": {"state": wide}})
    for p in other.parameters():
        held = other_opt.state[p]
        assert held["exp_avg"].dtype == torch.float32
        assert held["step"].dtype == wide["a.weight"]["step"].dtype  # the counter is kept
    step(other, other_opt, 1)


def test_distributed_tensor_types_this_torch_lacks_say_why():
    try:
        from torch.distributed._shard.sharded_tensor import ShardedTensor  # noqa: F401
        importable = True
    except Exception as e:
        importable, error = False, f"{type(e).__name__}: {e}"
    if importable:
        assert "ShardedTensor" not in ckptdb.torch.unavailable
    else:
        # Debian's torch 1.13 on Python 3.11: "mutable default ... TensorProperties".
        assert error in ckptdb.torch.unavailable["ShardedTensor"]
    if not hasattr(torch.distributed, "tensor") and not hasattr(torch.distributed, "_tensor"):
        assert "no DTensor" in ckptdb.torch.unavailable["DTensor"]


SUBCLASS_FIRST = '''
import torch, ckptdb.torch
class MySGD(torch.optim.SGD):
    def __init__(self, params):
        super().__init__(params, lr=0.1, momentum=0.9, weight_decay=0.1)
model = torch.nn.Linear(3, 2)
opt = MySGD(model.parameters())  # the first SGD of the process: torch wraps MySGD.step
state = ckptdb.torch.get_state_dict(model, opt)
print(max(float(s["momentum_buffer"].abs().max()) for s in state["optim"]["state"].values()))
'''


def test_a_subclass_made_before_any_instance_of_its_torch_class_takes_its_step():
    # torch wraps an optimizer class's step when its first instance is made, in the subclass's
    # own attribute when that instance is the subclass's: it still takes torch's step, and its
    # fresh state is SGD's (a zero momentum buffer, not the fallback step's weight decay).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", SUBCLASS_FIRST], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) == 0.0


def test_import_ckptdb_does_not_import_torch():
    code = "import sys, ckptdb; print('torch' in sys.modules); ckptdb.torch; print('torch' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_bool_tensors_and_bool_buffers_round_trip(tmp_path):
    """torch 1.13 refuses to export bool tensors through DLPack; host ones go through their
    numpy view (the tensor's own memory), so a model's bool buffer saves and loads."""
    model = nn.Module()
    model.register_buffer("mask", torch.tensor([True, False, True]))
    state = {**ckptdb.torch.get_state_dict(model),
             "row": torch.tensor([[False, True], [True, True]])[:, 1]}  # a strided view
    with ckptdb.open(str(tmp_path / "s")) as db:
        db.save(state, step=1)
        assert db.metadata()["tensors"]["model.mask"]["dtype"] == "bool"
        fresh = nn.Module()
        fresh.register_buffer("mask", torch.zeros(3, dtype=torch.bool))
        back = {**ckptdb.torch.get_state_dict(fresh), "row": torch.zeros(2, dtype=torch.bool)}
        db.load(back)
    assert torch.equal(fresh.mask, torch.tensor([True, False, True]))
    assert torch.equal(back["row"], torch.tensor([True, True]))


def test_arguments_that_are_not_a_model_or_an_optimizer_are_invalid():
    model = torch.nn.Linear(2, 2)
    for call in (lambda: ckptdb.torch.get_state_dict("x"),
                 lambda: ckptdb.torch.get_state_dict(model, "adam"),
                 lambda: ckptdb.torch.set_state_dict(None, None, {}),
                 lambda: ckptdb.torch.set_state_dict(model, None, [])):
        with pytest.raises(ckptdb.InvalidArgumentError, match="must be"):
            call()


@pytest.mark.parametrize("state,where", [
    ({"model": [1, 2]}, r"state\['model'\]"),
    ({"optim": 5}, r"state\['optim'\] must be a dict"),
    ({"optim": {"state": [1, 2]}}, r"\['state'\] must be a dict"),
    ({"optim": {"state": {"weight": 5}}}, r"\['state'\]\['weight'\] must be a dict"),
    ({"optim": {"param_groups": {"weight": 1}}}, r"\['param_groups'\]\['weight'\] must be a dict"),
    ({"optim": {"param_groups": 5}}, r"\['param_groups'\] must be a dict of parameter names"),
    ({"optim": {"param_groups": [5]}}, r"\['param_groups'\]\[0\] must be a dict"),
    ({"optim": {"param_groups": [{"params": "weight"}]}}, r"\['params'\] must be a list"),
    ({"optim": {"param_groups": [{"params": [[0], {}]}]}}, r"\['params'\] must be a list"),
    ({"optim": {"param_groups": {0: {"lr": 1}, "zz": {"lr": 1}}}}, "lacks: \\[0, 'zz'\\]"),
    ({"optim": {"state": {0: {}, "zz": {}}}}, "lacks: \\[0, 'zz'\\]"),
])
def test_set_state_dict_refuses_a_malformed_state_naming_where(state, where):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    with pytest.raises(ckptdb.InvalidArgumentError, match=where):
        ckptdb.torch.set_state_dict(model, opt, state)


def test_a_param_group_without_parameters_keeps_its_hyper_parameters(tmp_path):
    # A group whose parameters come later (unfrozen after a warm-up) has hyper-parameters
    # of its own; a "params" entry in the saved state never replaces the optimizer's own.
    def make():
        model = torch.nn.Linear(2, 2)
        return model, torch.optim.SGD([{"params": [model.weight, model.bias]},
                                       {"params": [], "lr": 0.3}], lr=0.1)
    model, opt = make()
    opt.param_groups[0]["lr"], opt.param_groups[1]["lr"] = 0.05, 0.777
    state = ckptdb.torch.get_state_dict(model, opt)
    with ckptdb.open(str(tmp_path / "store")) as db:
        db.save(state, step=1)
        other, other_opt = make()
        target = ckptdb.torch.get_state_dict(other, other_opt)
        db.load(target)
    target["optim"]["param_groups"]["weight"]["params"] = ["nothing"]
    ckptdb.torch.set_state_dict(other, other_opt, target)
    assert [g["lr"] for g in other_opt.param_groups] == [0.05, 0.777]
    assert other_opt.param_groups[0]["params"] == [other.weight, other.bias]


def test_a_tensor_with_its_negative_bit_saves_the_values_it_shows(tmp_path):
    z = torch.complex(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    shown = z.conj().imag  # a lazily negated view: torch's DLPack export drops the bit
    assert shown.is_neg()
    with ckptdb.open(str(tmp_path / "s")) as db:
        db.save({"x": shown, "y": torch._neg_view(torch.ones(3))}, step=1)
        np.testing.assert_array_equal(db.read("x"), [-3.0, -4.0])
        np.testing.assert_array_equal(db.read("y"), [-1.0, -1.0, -1.0])
        target = torch.complex(torch.zeros(2), torch.zeros(2)).conj().imag
        with pytest.raises(ckptdb.InvalidArgumentError, match="'x'.*negative bit"):
            db.load({"x": target})
        assert target.tolist() == [0.0, 0.0]
        plain = torch.zeros(2)
        db.load({"x": plain})
        assert plain.tolist() == [-3.0, -4.0]


def test_named_tensors_save_and_load_in_place(tmp_path):
    saved = torch.arange(6, dtype=torch.float32).reshape(2, 3).refine_names("N", "C")
    with ckptdb.open(str(tmp_path / "s")) as db:
        db.save({"w": saved}, step=1)
        target = torch.zeros(2, 3, names=("N", "C"))
        version = target._version
        db.load({"w": target})
        assert target.names == ("N", "C")
        assert torch.equal(target.rename(None), saved.rename(None))
        assert target._version > version  # autograd sees the write


def test_a_list_under_two_keys_of_a_load_target_takes_each_keys_values(tmp_path):
    with ckptdb.open(str(tmp_path / "s")) as db:
        db.save({"a": [1.0], "b": [2.0], "c": {"d": [3.0, [4.0]]}, "e": {"d": [5.0, [6.0]]}},
                step=1)
        shared = [0.0]
        inner = [0.0, [0.0]]
        target = {"a": shared, "b": shared, "c": {"d": inner}, "e": {"d": inner}}
        db.load(target)
        assert target == {"a": [1.0], "b": [2.0], "c": {"d": [3.0, [4.0]]},
                          "e": {"d": [5.0, [6.0]]}}
        assert target["a"] is shared  # the first place keeps the list it held


def test_a_sequential_schedulers_shared_learning_rates_resume_as_saved(tmp_path):
    def make():
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=0.1)
        first = torch.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=2)
        second = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return opt, torch.optim.lr_scheduler.SequentialLR(opt, [first, second], milestones=[2])

    opt, sched = make()
    for _ in range(4):
        opt.step()
        sched.step()
    with ckptdb.open(str(tmp_path / "s")) as db:
        db.save({"sched": sched.state_dict()}, step=1)
        _, resumed = make()
        target = {"sched": resumed.state_dict()}
        # torch shares the list of last learning rates with its first scheduler.
        assert target["sched"]["_last_lr"] is target["sched"]["_schedulers"][0]["_last_lr"]
        db.load(target)
    resumed.load_state_dict(target["sched"])
    assert resumed.get_last_lr() == sched.get_last_lr()
    assert resumed._schedulers[0].get_last_lr() == sched._schedulers[0].get_last_lr()


def test_an_unsupported_dtype_is_named(tmp_path):
    with ckptdb.open(str(tmp_path / "s")) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="'model.z'.*complex64"):
            db.save({"model": {"z": torch.ones(2, dtype=torch.complex64)}}, step=1)
