"""The ``comm`` argument of :func:`ckptdb.open`: ``None``, an mpi4py communicator (taken by the
extension module) or a ``torch.distributed`` process group, for which ckptdb connects the
group's members with a gloo communicator of its own, through the store of the job's
rendezvous (torchrun's ``env://``: ``MASTER_ADDR``, ``MASTER_PORT``). Neither torch nor
mpi4py is imported here: a process group exists only where its caller imported torch."""

import os as _os
import sys as _sys
import threading as _threading

from . import _ckptdb

# Communicators made per group (by its members' global ranks): every member opens stores over
# a group in the same order, so the n-th open of each member meets the others' n-th under
# the same store prefix.
_opened = {}
_opened_lock = _threading.Lock()


def torch_process_group(comm):
    """``comm`` when it is a ``torch.distributed`` process group, else None."""
    dist = _sys.modules.get("torch.distributed")
    if dist is None:
        return None
    group_type = getattr(dist, "ProcessGroup", None)
    if group_type is None or not isinstance(comm, group_type):
        return None
    return comm


def _global_ranks(dist, group):
    ranks = getattr(dist, "get_process_group_ranks", None)
    if ranks is not None:
        return list(ranks(group))
    c10d = dist.distributed_c10d
    if group is c10d.GroupMember.WORLD or group is c10d._get_default_group():
        return list(range(dist.get_world_size()))
    return sorted(c10d._pg_group_ranks[group].keys())


def _default_store(dist):
    store = getattr(dist.distributed_c10d, "_get_default_store", None)
    if store is None:
        from . import Error
        raise Error(
            "comm: this torch.distributed has no default store to meet the group's members "
            "through (torch.distributed.distributed_c10d._get_default_store)")
    return store()


def _non_group_member(comm):
    """Whether ``comm`` is what ``torch.distributed.new_group`` returns to a process outside
    the group (``GroupMember.NON_GROUP_MEMBER``)."""
    dist = _sys.modules.get("torch.distributed")
    c10d = getattr(dist, "distributed_c10d", None) if dist is not None else None
    member = getattr(c10d, "GroupMember", None) if c10d is not None else None
    return member is not None and comm is getattr(member, "NON_GROUP_MEMBER", object())


def communicator(comm):
    """What the extension module's ``DB`` takes for ``comm``: None, an mpi4py communicator as
    it is, or the gloo communicator of a torch.distributed group's member."""
    group = torch_process_group(comm)
    if group is None:
        if _non_group_member(comm):
            from . import InvalidArgumentError
            dist = _sys.modules["torch.distributed"]
            who = f" (global rank {dist.get_rank()})" if dist.is_initialized() else ""
            raise InvalidArgumentError(
                f"comm: this process{who} is not a member of the torch.distributed group "
                f"(new_group gave it NON_GROUP_MEMBER); only its members call ckptdb")
        return comm
    dist = _sys.modules["torch.distributed"]
    if not dist.is_initialized():
        from . import Error
        raise Error(
            "comm is a torch.distributed process group, but torch.distributed is not "
            "initialized (call torch.distributed.init_process_group first)")
    rank = dist.get_rank(group)
    if rank < 0:
        from . import InvalidArgumentError
        raise InvalidArgumentError(
            f"comm: this process (global rank {dist.get_rank()}) is not a member of the "
            f"torch.distributed group; only its members call ckptdb")
    members = _global_ranks(dist, group)
    key = tuple(members)
    with _opened_lock:
        n = _opened.get(key, 0)
        _opened[key] = n + 1
    name = ",".join(map(str, members)) if len(members) <= 16 else (
        f"{len(members)}:{hash(key) & 0xffffffffffff:x}")
    prefix = f"ckptdb/{name}/{n}"
    timeout = _group_timeout(dist, group)
    return _ckptdb.gloo_communicator(
        _default_store(dist), rank, dist.get_world_size(group), prefix,
        interface=_os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0],
        timeout_seconds=timeout.total_seconds() if timeout is not None else 0.0)


def _group_timeout(dist, group):
    """The group's own timeout (init_process_group's or new_group's `timeout`), else torch's
    default for process groups."""
    try:
        timeout = group.options._timeout
    except AttributeError:  # a backend or torch version without it
        timeout = None
    if timeout is None or timeout.total_seconds() <= 0:
        timeout = getattr(dist, "default_pg_timeout", None)
    return timeout
