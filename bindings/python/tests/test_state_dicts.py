"""State dicts as training loops have them (docs/api.md "Any Python state dict a training loop
has"): str and int keys, dict/list/tuple containers, None, numpy scalars and 0-d arrays,
saved and loaded back as exactly the structure they were."""
import sys

import numpy as np
import pytest

import ckptdb
from conftest import rand


def optimizer_like(seed=0, lr=1e-3, betas=(0.9, 0.999), step=3):
    """The shape of torch's optimizer.state_dict(): state keyed by int parameter index,
    param_groups a list of dicts with a tuple (betas), None and int lists."""
    return {
        "state": {
            0: {"step": np.array(float(step), np.float32), "exp_avg": rand((4, 3), seed=seed)},
            1: {"step": np.array(float(step), np.float32), "exp_avg": rand((3,), seed=seed + 1)},
        },
        "param_groups": [{"lr": lr, "betas": betas, "eps": 1e-8, "foreach": None,
                          "amsgrad": False, "params": [0, 1]}],
    }


def zeros_like(state):
    """The same structure with every array zeroed (new arrays) and other small values."""
    if isinstance(state, dict):
        return {k: zeros_like(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(zeros_like(v) for v in state)
    if isinstance(state, np.ndarray):
        return np.zeros_like(state)
    if state is None or isinstance(state, bool):
        return state
    if isinstance(state, (int, float)):
        return type(state)(-7)
    return state


def test_torch_optimizer_state_round_trips_with_int_keys_lists_tuples_and_none(store):
    saved = {"optim": optimizer_like(), "step": 3, "rng": np.int64(42), "scale": np.float32(0.5)}
    with ckptdb.open(store) as db:
        info = db.save(saved, step=3)
        assert info.num_tensors == 4
        target = {"optim": zeros_like(optimizer_like()), "step": 0, "rng": 0, "scale": 0.0}
        group = target["optim"]["param_groups"][0]
        groups, params, betas = target["optim"]["param_groups"], group["params"], group["betas"]
        exp_avg = target["optim"]["state"][1]["exp_avg"]
        db.load(target)
    # Arrays are filled in place, int keys stay ints.
    assert target["optim"]["state"][1]["exp_avg"] is exp_avg
    assert set(target["optim"]["state"]) == {0, 1}
    np.testing.assert_array_equal(exp_avg, saved["optim"]["state"][1]["exp_avg"])
    assert float(target["optim"]["state"][0]["step"]) == 3.0
    # Lists are the same objects with their small values replaced in place.
    assert target["optim"]["param_groups"] is groups and group["params"] is params
    assert params == [0, 1]
    # A tuple is replaced in its parent by a new tuple of the loaded values.
    assert group["betas"] is not betas and group["betas"] == (0.9, 0.999)
    assert type(group["betas"]) is tuple
    assert group["foreach"] is None and group["lr"] == 1e-3 and group["eps"] == 1e-8
    assert target["step"] == 3 and target["rng"] == 42 and target["scale"] == 0.5


def test_arrays_inside_tuples_are_filled_in_place_and_nested_tuples_rebuilt(store):
    inner = rand((2, 2), seed=5)
    with ckptdb.open(store) as db:
        db.save({"t": (inner, (1, "a", None), [2, (3, 4)])})
        arr = np.zeros((2, 2), np.float32)
        lst = [0, (0, 0)]
        target = {"t": (arr, (0, "b", None), lst)}
        db.load(target)
    t = target["t"]
    assert type(t) is tuple and t[0] is arr and t[2] is lst
    np.testing.assert_array_equal(arr, inner)
    assert t[1] == (1, "a", None)
    assert lst == [2, (3, 4)] and type(lst[1]) is tuple


def test_a_tuple_object_shared_by_two_groups_gets_each_groups_values(store):
    # torch's param_groups share their default `betas` tuple object.
    with ckptdb.open(store) as db:
        db.save({"g": [{"betas": (0.1, 0.2)}, {"betas": (0.3, 0.4)}]})
        shared = (0.0, 0.0)
        target = {"g": [{"betas": shared}, {"betas": shared}]}
        db.load(target)
    assert target["g"][0]["betas"] == (0.1, 0.2) and target["g"][1]["betas"] == (0.3, 0.4)
    assert shared == (0.0, 0.0)


def test_flat_mapping_keeps_int_parts_and_read_takes_int_path_parts(store):
    w = rand((4, 3))
    with ckptdb.open(store) as db:
        db.save({"optim": {"state": {0: {"exp_avg": w}}, "betas": (0.9, 0.99)},
                 "layers": [{"w": w}], "none": None})
        md = db.metadata()
        assert md["flat_mapping"]["optim.state.0.exp_avg"] == ["optim", "state", 0, "exp_avg"]
        assert md["flat_mapping"]["optim.betas.1"] == ["optim", "betas", 1]
        assert md["flat_mapping"]["layers.0.w"] == ["layers", 0, "w"]
        assert md["values"] == {"optim.betas.0": 0.9, "optim.betas.1": 0.99, "none": None}
        assert type(md["flat_mapping"]["layers.0.w"][1]) is int
        np.testing.assert_array_equal(db.read(("optim", "state", 0, "exp_avg")), w)
        np.testing.assert_array_equal(db.read(["layers", 0, "w"]), w)
        np.testing.assert_array_equal(db.read("layers.0.w"), w)


@pytest.mark.parametrize("order", ["sorted", "reversed", "shuffled", "numeric"])
def test_a_dict_converts_whatever_order_its_keys_come_in(store, order):
    # Int and str keys, runs in key order and jumps back, small values between tensors.
    keys = [f"layer{i}" for i in range(25)] + list(range(12)) + ["a", "b.c", "z"]
    if order == "sorted":
        keys.sort(key=lambda k: (isinstance(k, str), k))
    elif order == "reversed":
        keys.sort(key=lambda k: (isinstance(k, str), k), reverse=True)
    elif order == "shuffled":
        keys = [keys[i] for i in np.random.default_rng(3).permutation(len(keys))]

    def state(fill):
        out = {}
        for n, k in enumerate(keys):
            if n % 5 == 4:
                out[k] = n if fill else -1
            else:
                out[k] = {"w": np.full((3,), n if fill else 0, np.float32), "step": n if fill else 0}
        return out

    saved = state(True)
    with ckptdb.open(store) as db:
        db.save(saved)
        flat = db.metadata()["flat_mapping"]
        assert len(flat) == 2 * len(keys) - len(keys) // 5
        target = state(False)
        assert db.load(target).missing_keys == []
    assert list(target) == keys  # the dict itself is not reordered
    for k in keys:
        if isinstance(saved[k], dict):
            np.testing.assert_array_equal(target[k]["w"], saved[k]["w"])
            assert target[k]["step"] == saved[k]["step"]
        else:
            assert target[k] == saved[k]


def test_a_checkpoint_of_str_keys_still_has_str_parts(store):
    with ckptdb.open(store) as db:
        db.save({"m": {"0": rand((2,))}})
        assert db.metadata()["flat_mapping"] == {"m.0": ["m", "0"]}


def test_int_and_str_key_that_collide_raise_naming_the_path(store):
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.InvalidArgumentError) as e:
            db.save({"optim": {"state": {0: rand((2,)), "0": rand((2,))}}})
        assert "'optim.state.0'" in str(e.value)
        assert "['optim', 'state', 0]" in str(e.value) and "['optim', 'state', '0']" in str(e.value)
        assert db.checkpoints() == []
        db.save({"optim": {"state": {0: 1}}})
        with pytest.raises(ckptdb.InvalidArgumentError, match="optim.state.0"):
            db.load({"optim": {"state": {0: 1, "0": 2}}})


@pytest.mark.parametrize("key", [1.5, b"k", True, (1, 2), 2 ** 70])
def test_keys_other_than_str_and_int_are_invalid(store, key):
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="'a'"):
            db.save({"a": {key: 1}})
        assert db.checkpoints() == []


def test_containers_that_contain_themselves_are_invalid(store):
    cyclic_list = [1]
    cyclic_list.append(cyclic_list)
    via_dict = {"x": []}
    via_dict["x"].append(via_dict)
    with ckptdb.open(store) as db:
        for state in ({"l": cyclic_list}, via_dict):
            with pytest.raises(ckptdb.InvalidArgumentError, match="contains itself"):
                db.save(state)
            with pytest.raises(ckptdb.InvalidArgumentError, match="contains itself"):
                db.load(state)
        shared = [1, 2]
        db.save({"a": shared, "b": (shared, shared)})  # shared, not cyclic
        assert len(db.checkpoints()) == 1


def test_nesting_deeper_than_1000_containers_is_invalid(store):
    def chain(levels):
        root = leaf = [None]
        for _ in range(levels - 2):
            leaf[0] = [None]
            leaf = leaf[0]
        leaf[0] = np.arange(3, dtype=np.float32)
        return {"l": root}
    with ckptdb.open(store) as db:
        with pytest.raises(ckptdb.InvalidArgumentError, match="1000 levels"):
            db.save(chain(1001))
        db.save(chain(1000))
        assert len(db.checkpoints()) == 1


def test_zero_d_arrays_are_tensors_and_numpy_scalars_small_values(store):
    with ckptdb.open(store) as db:
        db.save({"t": np.array(2.5, np.float64), "s": np.float64(2.5), "i": np.int32(7)})
        md = db.metadata()
        assert md["tensors"]["t"]["global_shape"] == []
        assert md["values"] == {"s": 2.5, "i": 7}
        t = np.zeros((), np.float64)
        target = {"t": t, "s": 0.0, "i": 0}
        db.load(target)
        assert target["t"] is t and float(t) == 2.5 and target["i"] == 7


def test_a_list_target_where_a_tuple_was_saved_loads_by_flat_key(store):
    # Loads match flat keys; the target's own containers are kept.
    with ckptdb.open(store) as db:
        db.save({"b": (0.9, 0.99)})
        target = {"b": [0.0, 0.0]}
        db.load(target)
        assert target["b"] == [0.9, 0.99]


def test_a_named_tuple_comes_back_as_the_same_named_tuple(store):
    """JAX's optax keeps optimizer states in namedtuples: a load replaces a tuple whose small
    values changed by one of the same type, fields and attribute access included."""
    import collections
    State = collections.namedtuple("State", ["mu", "count"])
    Outer = collections.namedtuple("Outer", ["inner", "step"])
    with ckptdb.open(store) as db:
        db.save({"opt": Outer(State(mu=np.arange(4.0), count=3), step=7)}, step=1)
        target = {"opt": Outer(State(mu=np.zeros(4), count=0), step=0)}
        mu = target["opt"].inner.mu
        db.load(target)
    assert type(target["opt"]) is Outer and type(target["opt"].inner) is State
    assert target["opt"].step == 7 and target["opt"].inner.count == 3
    assert target["opt"].inner.mu is mu and np.array_equal(mu, np.arange(4.0))


def test_ints_beyond_64_bits_round_trip_as_ints(store):
    """Python's int has no bound: numpy's Generator keeps its 128-bit PCG64 state in ints, so a
    training loop's RNG state saves and resumes as it is."""
    rng = np.random.default_rng(12345)
    rng.standard_normal(3)
    edges = [2**63, -2**63 - 1, 2**64, -2**64, 10**40, -(2**127) * 3, 2**63 - 1, -2**63]
    with ckptdb.open(store) as db:
        db.save({"rng": rng.bit_generator.state, "edges": edges}, step=1)
        md = db.metadata()
        assert md["values"]["edges.0"] == 2**63 and md["values"]["edges.5"] == -(2**127) * 3
        fresh = np.random.default_rng(0)
        target = {"rng": fresh.bit_generator.state, "edges": [0] * len(edges)}
        db.load(target)
        assert target["edges"] == edges and all(type(v) is int for v in target["edges"])
        fresh.bit_generator.state = target["rng"]
        assert np.array_equal(fresh.standard_normal(5), rng.standard_normal(5))


def test_unsigned_32_and_64_bit_arrays_round_trip_and_cast_by_value(store):
    """numpy's legacy RNG state is a uint32 array (np.random.get_state()), JAX's PRNG keys are
    uint32 arrays: they save and load as they are."""
    np.random.seed(3)
    np.random.standard_normal(2)
    legacy = np.random.get_state()
    u64 = np.array([0, 1, 2**63, 2**64 - 1], np.uint64)
    with ckptdb.open(store) as db:
        db.save({"rng": legacy, "u64": u64, "u32": np.arange(5, dtype=np.uint32) * 1000003},
                step=1)
        md = db.metadata()
        assert md["tensors"]["u64"]["dtype"] == "uint64"
        assert md["tensors"]["rng.1"]["dtype"] == "uint32"
        np.random.seed(0)
        target = {"rng": np.random.get_state(), "u64": np.zeros(4, np.uint64),
                  "u32": np.zeros(5, np.uint32)}
        db.load(target)
        np.random.set_state(target["rng"])
        after = np.random.standard_normal(3)
        np.random.set_state(legacy)
        assert np.array_equal(after, np.random.standard_normal(3))
        assert np.array_equal(target["u64"], u64)
        as_float = {"u64": np.zeros(4, np.float64)}
        db.load(as_float, cast=True, strict=False)
        assert as_float["u64"].tolist() == [0.0, 1.0, 2.0**63, 2.0**64]
        assert np.array_equal(db.read("u32"), np.arange(5, dtype=np.uint32) * 1000003)


def test_ints_of_more_digits_than_pythons_str_limit_round_trip(store):
    """Python 3.11 limits int <-> str conversions to 4,300 digits by default; an int of any size
    saves, and reads back in a process with that limit."""
    huge = [10**4300 + 7, -(2**100000), 3**9000]
    with ckptdb.open(store) as db:
        db.save({"big": huge}, step=1)
        target = {"big": [0, 0, 0]}
        db.load(target)
        assert target["big"] == huge
        assert db.metadata()["values"]["big.1"] == -(2**100000)
    if hasattr(sys, "get_int_max_str_digits"):
        assert sys.get_int_max_str_digits() == 4300  # left as it was
