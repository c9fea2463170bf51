"""ckptdb: an embedded database for sharded deep-learning checkpoints.

Saves the shards of a training step held by one or many processes as one
checkpoint (replicas stored once, nested state dicts kept), commits it
atomically, and loads it back into any number of processes with any other
sharding, reading each stored byte once. No pickle: tensors are raw bytes with
checksums, small values are typed.

    import ckptdb, numpy as np
    with ckptdb.open("/tmp/store") as db:
        db.save({"model": {"w": np.ones((4, 8), np.float32)}, "step": 10}, step=10)
        target = {"model": {"w": np.zeros((4, 8), np.float32)}, "step": 0}
        db.load(target)            # fills arrays in place, replaces small values

State dicts are dicts with str or int keys, lists and tuples nested freely (a
load gives back the same structure: int keys stay ints, lists and tuples stay
lists and tuples). Leaves are numpy arrays (strided views too; 0-d ones too),
objects with ``__dlpack__`` (torch, cupy, jax; zero copy), :class:`Shard`
objects for a piece of a global tensor, :class:`FlatShard` objects for a flat
range of one, and small values (int, float, bool, str, bytes, None, numpy
scalars). :mod:`ckptdb.torch` gives the state of a torch model and optimizer
(the only part of ckptdb that imports torch). numpy has no bfloat16: uint16
numpy arrays are bfloat16 bits, and bfloat16 tensors read back as uint16.
With ``comm`` (an mpi4py communicator, or a ``torch.distributed`` process group of a job
started the way ``torchrun`` starts it) every rank calls ``open``, ``save``,
``load``, ``delete`` and ``close`` together, and an error on any rank is raised
on every rank; ranks that pass different ``step``, ``tag``, ``metadata``,
selectors, ``strict`` or ``cast`` all raise :class:`InvalidArgumentError`.
Every bad argument raises :class:`InvalidArgumentError` naming it.
"""

import functools as _functools
import inspect as _inspect
import operator as _operator
import os as _os
import sys as _sys

from . import _ckptdb

__all__ = [
    "open", "DB", "SaveHandle", "Shard", "FlatShard", "CheckpointInfo", "LoadResult", "LoadStats",
    "Error", "NotFoundError", "InvalidArgumentError", "CorruptionError",
    "__version__",
]

__version__ = _ckptdb.version()


def __getattr__(name):
    """``ckptdb.torch`` is imported on first use: ``import ckptdb`` never imports torch."""
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'ckptdb' has no attribute {name!r}")


class Error(RuntimeError):
    """Base class of every ckptdb error (I/O errors, closed stores, read-only
    handles, MPI failures among them)."""


class NotFoundError(Error, KeyError):
    """A checkpoint, key or store that does not exist; the message names it."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(Error, ValueError):
    """Invalid input: bad layouts, dtype or shape mismatches, duplicate tags,
    unsupported leaves. Nothing was written."""


class CorruptionError(Error):
    """Stored bytes or metadata failed their checksum or validation."""


def _api(fn):
    """Makes every failure of a call of ``fn`` for a bad argument a ckptdb error:
    a call that does not match the signature, or a Python error from an
    argument's own methods (a ``__dlpack__`` that raises, say), becomes
    :class:`InvalidArgumentError` naming the call. ckptdb errors, MemoryError
    and KeyboardInterrupt pass unchanged."""
    signature = _inspect.signature(fn)
    name = fn.__qualname__.replace("__init__", "").rstrip(".") or fn.__name__

    @_functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (Error, MemoryError):
            raise
        except Exception as e:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as mismatch:
                raise InvalidArgumentError(f"{name}(): {mismatch}") from None
            raise InvalidArgumentError(f"{name}(): {type(e).__name__}: {e}") from e

    return call


def _ints(values, what, owner="Shard"):
    """`values` as a tuple of ints; a bool is not taken for one."""
    try:
        out = tuple(_operator.index(d) for d in values)
        if any(isinstance(d, bool) for d in values):
            raise TypeError
        return out
    except TypeError:
        raise InvalidArgumentError(
            f"{owner}: {what} must be a sequence of ints, got {values!r}") from None


class Shard:
    """A rank's piece of a global tensor.

    ``data``: a numpy array or DLPack tensor whose shape is the local shape
    (non-contiguous views too, such as a transpose or a slice; a reversed
    numpy view is saved from a copy and refused as a load target). ``global_shape`` / ``global_offset``: the whole tensor's shape
    and where this piece starts in it. ``dtype`` (optional, a ckptdb dtype name
    such as ``"bfloat16"`` or ``"float8_e4m3fn"``) reinterprets data of the same
    element size, for dtypes numpy lacks. When several ranks pass the same box
    of the same key it is a replica: stored once.
    """

    __slots__ = ("data", "global_shape", "global_offset", "dtype")

    @_api
    def __init__(self, data, global_shape, global_offset, *, dtype=None):
        if not hasattr(data, "__dlpack__"):  # numpy arrays have it too
            raise InvalidArgumentError(
                "Shard: data must be a numpy array or a DLPack tensor (an object with "
                f"__dlpack__), got {type(data).__name__}")
        if dtype is not None and not isinstance(dtype, str):
            raise InvalidArgumentError(
                f"Shard: dtype must be None or a dtype name (str), got {type(dtype).__name__}")
        self.global_shape = _ints(global_shape, "global_shape")
        self.global_offset = _ints(global_offset, "global_offset")
        if len(self.global_shape) != len(self.global_offset):
            raise InvalidArgumentError(
                f"Shard: global_shape {list(self.global_shape)} and global_offset "
                f"{list(self.global_offset)} differ in rank")
        self.data = data
        self.dtype = dtype

    def __repr__(self):
        shape = getattr(self.data, "shape", "?")
        return (f"Shard(local_shape={tuple(shape)}, global_shape={self.global_shape}, "
                f"global_offset={self.global_offset}"
                + (f", dtype={self.dtype!r}" if self.dtype else "") + ")")


class FlatShard:
    """A rank's flat range of a global tensor (how ZeRO, Megatron's distributed
    optimizer and FSDP shard flattened parameters).

    ``data``: a 1-D numpy array or DLPack tensor of ``n`` elements (strided
    views too), elements ``[flat_offset, flat_offset + n)`` of the row-major
    flattening of a tensor of ``global_shape``. Usable as a save source and a
    load target, mixed with :class:`Shard` objects and whole arrays across
    ranks and across save and load. Validated like boxes: no gaps, and
    overlaps only where the ranges' boxes are identical replicas. ``dtype`` as
    for :class:`Shard`.
    """

    __slots__ = ("data", "global_shape", "flat_offset", "dtype")

    @_api
    def __init__(self, data, global_shape, flat_offset, *, dtype=None):
        if not hasattr(data, "__dlpack__"):
            raise InvalidArgumentError(
                "FlatShard: data must be a 1-D numpy array or DLPack tensor (an "
                f"object with __dlpack__), got {type(data).__name__}")
        if dtype is not None and not isinstance(dtype, str):
            raise InvalidArgumentError(
                f"FlatShard: dtype must be None or a dtype name (str), got {type(dtype).__name__}")
        self.global_shape = _ints(global_shape, "global_shape", "FlatShard")
        try:
            if isinstance(flat_offset, bool):
                raise TypeError
            self.flat_offset = _operator.index(flat_offset)
        except TypeError:
            raise InvalidArgumentError(
                f"FlatShard: flat_offset must be an int, got {flat_offset!r}") from None
        self.data = data
        self.dtype = dtype

    def __repr__(self):
        shape = getattr(self.data, "shape", "?")
        return (f"FlatShard(local_shape={tuple(shape)}, global_shape={self.global_shape}, "
                f"flat_offset={self.flat_offset}"
                + (f", dtype={self.dtype!r}" if self.dtype else "") + ")")


CheckpointInfo = _ckptdb.CheckpointInfo
LoadResult = _ckptdb.LoadResult
LoadStats = _ckptdb.LoadStats

_ckptdb._register(Error, NotFoundError, InvalidArgumentError, CorruptionError, Shard)
_ckptdb._register_flat_shard(FlatShard)


class DB:
    """An open store. Use :func:`open`; a context manager that closes it."""

    @_api
    def __init__(self, path, comm=None, *, create=True, read_only=False, **options):
        from . import _comm
        communicator = _comm.communicator(comm)
        try:
            encoded = _os.fsencode(path)
        except (TypeError, ValueError) as e:
            error = InvalidArgumentError(
                f"path must be a str, bytes or os.PathLike naming a directory: {e}")
            # The other ranks' open fails too, instead of waiting for this rank.
            _ckptdb._fail_open(communicator, str(error))
            raise error from None
        self._path = _os.fspath(path)
        self._db = _ckptdb.DB(encoded, communicator, create, read_only, options)

    @_api
    def save(self, state_dict, *, step=None, tag=None, metadata=None):
        """Saves ``state_dict`` (nested dict of tensors and small values) as a
        new checkpoint and returns its :class:`CheckpointInfo`. Collective with
        ``comm``. Ranks may pass different key sets; a small value is taken from
        the lowest rank that has it. ``tag`` must be unique in the store;
        ``metadata`` is a dict of str to str kept with the checkpoint. Invalid
        input raises :class:`InvalidArgumentError` naming the key, before
        anything is written."""
        return self._db.save(state_dict, step=step, tag=tag, metadata=metadata)

    @_api
    def save_async(self, state_dict, *, step=None, tag=None, metadata=None):
        """Like :meth:`save`, returning a :class:`SaveHandle` as soon as every
        tensor is copied into host memory (option ``snapshot_bytes`` bounds
        that memory; a larger state waits for earlier chunks to be written):
        the caller may change its tensors at once. Invalid input raises here,
        on every rank. Writing, the commit and retention go on in the
        background; every other collective call on the DB (``save``,
        ``save_async``, ``load``, ``delete``, ``close``) first waits for it; when it
        failed and no :meth:`SaveHandle.wait` raised its error, that call raises
        the error instead of doing its own work (``close`` closes first), once.
        With ``comm``, MPI must run at ``MPI_THREAD_MULTIPLE`` (mpi4py's
        default)."""
        return SaveHandle(self._db.save_async(state_dict, step=step, tag=tag,
                                              metadata=metadata))

    @_api
    def load(self, state_dict, *, step=None, tag=None, id=None, strict=True, cast=False):
        """Fills every tensor leaf of ``state_dict`` in place from a checkpoint
        (the latest unless ``step``, ``tag`` or ``id`` selects one), resharding
        as needed, and replaces small-value leaves by the stored values.
        ``strict``: a key the checkpoint lacks raises :class:`NotFoundError`;
        otherwise it is left untouched and listed in ``missing_keys``.
        ``cast``: convert between numeric dtypes instead of raising. Returns a
        :class:`LoadResult`. Collective with ``comm``."""
        return self._db.load(state_dict, step=step, tag=tag, id=id, strict=strict, cast=cast)

    @_api
    def checkpoints(self):
        """Committed checkpoints, oldest first: a list of :class:`CheckpointInfo`. Local."""
        return self._db.checkpoints()

    @_api
    def metadata(self, *, step=None, tag=None, id=None):
        """A checkpoint's layout as a dict: id, step, tag, created, world_size,
        tensors (dtype, global_shape, chunks with global_offset, local_shape,
        rank, nbytes), flat_mapping, values, user_metadata. Local."""
        return self._db.metadata(step=step, tag=tag, id=id)

    @_api
    def read(self, key, *, step=None, tag=None, id=None, index=None):
        """The tensor ``key`` (a flat key such as ``"model.w"`` or a tuple
        path) as a new numpy array; with ``index`` (an int, a slice with step
        1, or a tuple of them, e.g. ``np.s_[1024:2048, :]``; ints drop their
        dimension, as in numpy) only that part, read from only the stored
        chunks that hold it, each checksum-verified. A bad index (out of
        range, a step other than 1, more entries than dimensions) raises
        :class:`InvalidArgumentError` naming the key, the shape and the index.
        :attr:`last_read_bytes` then tells the chunk bytes read. Local."""
        return self._db.read(key, step=step, tag=tag, id=id, index=index)

    @_api
    def delete(self, *, step=None, tag=None, id=None):
        """Deletes a checkpoint (the latest unless selected) and reclaims its
        space. Collective with ``comm``."""
        self._db.delete(step=step, tag=tag, id=id)

    @_api
    def verify(self, *, step=None, tag=None, id=None):
        """Reads every chunk of a checkpoint and checks its checksum; raises
        :class:`CorruptionError` naming the first damaged chunk. Local."""
        self._db.verify(step=step, tag=tag, id=id)

    @_api
    def close(self):
        """Releases the store. Collective with ``comm``. Idempotent."""
        self._db.close()

    @property
    def closed(self):
        return self._db.closed

    @property
    def path(self):
        return self._path

    @property
    def last_read_bytes(self):
        """Bytes of the stored chunks the last successful :meth:`read` read
        (0 before any)."""
        return self._db.last_read_bytes

    @property
    def rank(self):
        """This process's rank in the store's communicator (0 without comm)."""
        return self._db.rank

    @property
    def world_size(self):
        """Number of ranks of the store's communicator (1 without comm)."""
        return self._db.size

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
            return False
        # The body's exception says what went wrong; a close that fails after it (its group's
        # connections failed in that very call, say) would hide it if raised. It goes into the
        # body's exception as a note instead: it may be a background save's failure, which no
        # other call will report.
        try:
            self.close()
        except Error as e:
            if exc is not None and hasattr(exc, "add_note"):
                exc.add_note(f"ckptdb: closing the store raised too: {e}")
            else:
                print(f"ckptdb: closing the store raised too: {e}", file=_sys.stderr)
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"rank {self.rank} of {self.world_size}"
        return f"<ckptdb.DB {self.path!r} {state}>"


class SaveHandle:
    """A save running in the background, from :meth:`DB.save_async`."""

    def __init__(self, handle):
        self._handle = handle

    @_api
    def done(self):
        """True once the save has finished (committed or failed). Local; never blocks."""
        return self._handle.done()

    @_api
    def wait(self):
        """Waits for the save and returns its :class:`CheckpointInfo`, or raises
        the save's error (the same on every rank). May be called again."""
        return self._handle.wait()

    def __repr__(self):
        return f"<ckptdb.SaveHandle {'done' if self.done() else 'running'}>"


@_api
def open(path, comm=None, *, create=True, read_only=False, **options):  # noqa: A001
    """Opens or creates the store at ``path`` (a directory) and returns a
    :class:`DB`. ``comm=None``: one process; an mpi4py communicator or a
    ``torch.distributed`` process group (``dist.group.WORLD``, or one from ``new_group``, whose
    members alone call): every rank
    calls ``open`` together. ``create``: create the store when absent.
    ``read_only``: never modify it. ``options`` map to the C++ ``Options``
    fields: ``max_chunk_bytes``, ``io_threads``, ``sync``, ``load_buffer_bytes``,
    ``snapshot_bytes`` (host memory of an asynchronous save's snapshot; 0: the
    rank's state), retention: ``keep_last`` (after each commit, the newest ``keep_last``
    checkpoints stay and older ones are deleted) and ``keep_every_steps``
    (checkpoints whose step is a multiple of it are never deleted by retention,
    nor are tagged ones; ``None`` keeps everything), ``incremental``
    (default True: a save refers to the chunks one of the store's newest
    checkpoints holds unchanged instead of writing them again) and
    ``incremental_depth`` (default 4: how many of the newest checkpoints a
    save compares each chunk with)."""
    return DB(path, comm, create=create, read_only=read_only, **options)
