// _ckptdb: the C++ side of the Python package (bindings/python/ckptdb): the DB
// class and the module. State dicts become StateDicts of borrowed views
// (state_dicts.h), DB calls run without the GIL, and failures raise the
// package's exception classes (errors.h).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <optional>
#include <thread>

#include "bindings/python/arguments.h"
#include "bindings/python/containers.h"
#include "bindings/python/errors.h"
#include "bindings/python/state_dicts.h"
#include "ckptdb/db.h"
#include "ckptdb/gloo.h"
#include "ckptdb/mpi.h"
#include "mpi4py/mpi4py.h"

namespace py = pybind11;

namespace ckptdb::python {
namespace {

// The state_dict argument of save and load.
py::dict StateDictArgument(const py::object& state) {
  if (!PyDict_Check(state.ptr()))
    Invalid("state_dict must be a dict, got " + TypeName(state));
  return py::reinterpret_borrow<py::dict>(state);
}

// Runs fn() without the GIL, so that other Python threads run while bytes
// move. fn must not touch Python objects.
template <typename Fn>
auto WithoutGil(Fn&& fn) -> decltype(fn()) {
  py::gil_scoped_release release;
  return fn();
}

// What save_async returns.
class PendingSaveHandle {
 public:
  explicit PendingSaveHandle(std::shared_ptr<PendingSave> pending)
      : pending_(std::move(pending)) {}
  bool Done() const { return pending_->Done(); }
  CheckpointInfo Wait() {
    Result<CheckpointInfo> info = WithoutGil([&] { return pending_->Wait(); });
    return Unwrap(std::move(info));
  }

 private:
  std::shared_ptr<PendingSave> pending_;
};

// torch.distributed's store (or any object with set(key, bytes) and
// get(key) -> bytes that waits for the key), called with the GIL. Each key set
// also counts up a key of its own (`<key>/set`, through the store's add), and
// a key not there yet is awaited by polling that count (add of 0, which never
// blocks) until `timeout` from the store's making (one bound for the whole
// set-up), never by a get that times out: torch's store client is left broken
// by a timed-out get (every later call of the job's own rendezvous then failed
// with "Broken pipe", torch's new_group included), and each such wait took a
// full timeout of its own. (torch 1.13's stores have no check(keys).)
class PythonRendezvousStore : public RendezvousStore {
 public:
  PythonRendezvousStore(py::object store, std::chrono::milliseconds timeout)
      : store_(std::move(store)),
        timeout_(timeout),
        deadline_(std::chrono::steady_clock::now() + timeout) {
    counts_ = py::hasattr(store_, "add");
  }
  ~PythonRendezvousStore() override {
    py::gil_scoped_acquire gil;
    store_ = py::object();
  }
  Status Set(const std::string& key, const std::string& value) override {
    py::gil_scoped_acquire gil;
    try {
      store_.attr("set")(key, py::bytes(value));
      if (counts_) store_.attr("add")(SetKey(key), 1);
      return Status::OK();
    } catch (py::error_already_set& e) {
      return Status::IOError("rendezvous: setting key '" + key +
                             "' in the store failed: " + e.what());
    }
  }
  Result<std::string> Get(const std::string& key) override {
    if (counts_) CKPTDB_RETURN_IF_ERROR(AwaitKey(key));
    py::gil_scoped_acquire gil;
    try {
      return std::string(py::bytes(store_.attr("get")(key)));
    } catch (py::error_already_set& e) {
      return Status::IOError("rendezvous: reading key '" + key +
                             "' from the store failed: " + e.what());
    }
  }

 private:
  static std::string SetKey(const std::string& key) { return key + "/set"; }

  Status AwaitKey(const std::string& key) {
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      {
        py::gil_scoped_acquire gil;
        try {
          if (store_.attr("add")(SetKey(key), 0).cast<int64_t>() > 0)
            return Status::OK();
        } catch (py::error_already_set& e) {
          return Status::IOError("rendezvous: awaiting key '" + key +
                                 "' in the store failed: " + e.what());
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline_) {
        return Status::IOError(
            "rendezvous: no rank set key '" + key +
            "' within the group's timeout of " +
            std::to_string(std::chrono::duration<double>(timeout_).count()) +
            " s (a rank that has not called open, or has failed)");
      }
      std::this_thread::sleep_for(
          std::min<std::chrono::nanoseconds>(pause, deadline_ - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

  py::object store_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  bool counts_ = false;  // the store has add(key, n)
};

// A communicator made in Python (ckptdb._comm): the gloo communicator of a
// torch.distributed group's members.
struct PyCommunicator {
  std::shared_ptr<Communicator> comm;
};

PyCommunicator MakeGlooCommunicator(py::object store, int rank, int size,
                                    const std::string& prefix,
                                    const std::string& interface,
                                    double timeout_seconds) {
  GlooOptions options{
      .rank = rank, .size = size, .prefix = prefix, .interface = interface};
  if (timeout_seconds > 0) {
    options.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  }
  auto adapter = std::make_shared<PythonRendezvousStore>(std::move(store),
                                                         options.timeout);
  Result<std::shared_ptr<Communicator>> comm =
      WithoutGil([&] { return GlooCommunicator(adapter, options); });
  return PyCommunicator{Unwrap(std::move(comm))};
}

// Whether `comm` is an mpi4py communicator. mpi4py's C API is taken only
// once mpi4py.MPI has been imported (by the caller, who made `comm`): `import
// ckptdb` never imports mpi4py, whose import initializes MPI.
bool IsMpi4pyComm(const py::object& comm) {
  const py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("mpi4py.MPI")) return false;
  if (import_mpi4py() < 0) throw py::error_already_set();
  return PyObject_TypeCheck(comm.ptr(), &PyMPIComm_Type);
}

// The communicator `comm` names (ckptdb._comm.communicator's result): null
// for None (one process).
std::shared_ptr<Communicator> CommunicatorOf(const py::object& comm) {
  if (py::isinstance<PyCommunicator>(comm))
    return comm.cast<PyCommunicator&>().comm;
  if (comm.is_none()) return nullptr;
  if (!IsMpi4pyComm(comm)) {
    Invalid(
        "comm must be an mpi4py communicator (mpi4py.MPI.Comm), a "
        "torch.distributed process group or None, got " +
        TypeName(comm));
  }
  return Unwrap(MpiCommunicator(*PyMPIComm_Get(comm.ptr())));
}

// Takes part in the open the other ranks of `comm` make, failing it on every
// rank with this rank's `error` (Options::invalid_arguments), so that they
// raise too instead of waiting for this rank or pairing its next open with
// theirs.
void FailOpen(const std::shared_ptr<Communicator>& comm,
              const std::string& error) {
  if (!comm || comm->size() == 1) return;
  Options invalid;
  invalid.invalid_arguments = error;
  (void)WithoutGil([&] { return DB::Open(invalid, "", comm).status(); });
}

// A state dict that fails a collective call on every rank with `why`.
StateDict InvalidStateDict(std::string why) {
  return StateDict::Invalid(Status::InvalidArgument(std::move(why)));
}

class PyDB {
 public:
  // `path`: bytes (os.fsencode) or str.
  PyDB(const std::string& path, const py::object& comm,
       const py::object& create, const py::object& read_only,
       const py::dict& options)
      : path_(path) {
    std::shared_ptr<Communicator> communicator = CommunicatorOf(comm);
    Options o;
    try {
      if (path.empty())
        Invalid("path is empty: name the directory of the store to open");
      if (path.find('\0') != std::string::npos)
        Invalid("path " + Repr(py::bytes(path)) + " contains a NUL character");
      o = Unwrap(OpenOptions(create, read_only, options));
    } catch (py::error_already_set& e) {
      FailOpen(communicator, py::str(e.value()));
      throw;
    }
    Result<std::unique_ptr<DB>> db =
        WithoutGil([&] { return DB::Open(o, path, std::move(communicator)); });
    db_ = Unwrap(std::move(db));
  }

  // The handle, held by the caller for its call: a close on another thread
  // (which waits for calls under way, DBImpl) then cannot free it under a
  // call that waits to run.
  std::shared_ptr<DB> db() {
    if (!db_)
      Raise(Status::FailedPrecondition("store '" + path_ + "' is closed"));
    return db_;
  }

  // Runs `convert`, which fills `arg`; when it raises on a rank of several,
  // the call still takes part in the collective `call` with `invalid(why)`
  // in place of `arg`, which fails it on every rank (StateDict::Invalid,
  // CheckpointSelector::Invalid), so that the other ranks raise too instead
  // of waiting for this rank or pairing its next call with theirs; then this
  // rank raises its own error.
  template <typename Arg, typename Convert, typename Invalid, typename Call>
  auto Collective(Convert&& convert, Arg& arg, Invalid&& invalid, Call&& call) {
    const std::shared_ptr<DB> d = db();
    std::exception_ptr failed;
    std::string why;
    try {
      convert();
    } catch (py::error_already_set& e) {
      failed = std::current_exception();
      why = py::str(e.value());
    } catch (const std::exception& e) {
      failed = std::current_exception();
      why = e.what();
    }
    if (failed) {
      if (d->communicator().size() > 1) {
        Arg stand_in = invalid(std::move(why));
        (void)WithoutGil([&] { return call(*d, stand_in); });
      }
      std::rethrow_exception(failed);
    }
    return WithoutGil([&] { return call(*d, arg); });
  }

  // The arguments of save and save_async, converted; `call` runs without the
  // GIL while the state's arrays are borrowed.
  template <typename Call>
  auto Saving(const py::object& state, const py::object& step,
              const py::object& tag, const py::object& metadata, Call&& call) {
    SaveOptions options;
    StateDict sd;
    Borrowed borrowed;
    return Collective(
        [&] {
          options.step = Unwrap(OptionalInt(step, "step"));
          options.tag = Unwrap(OptionalText(tag, "tag"));
          if (!metadata.is_none())
            options.user_metadata = Unwrap(TextMap(metadata, "metadata"));
          Convert(StateDictArgument(state), false, sd, borrowed);
        },
        sd, InvalidStateDict,
        [&](DB& d, StateDict& given) { return call(d, given, options); });
  }

  py::object Save(const py::object& state, const py::object& step,
                  const py::object& tag, const py::object& metadata) {
    Result<CheckpointInfo> info =
        Saving(state, step, tag, metadata,
               [](DB& d, const StateDict& sd, const SaveOptions& o) {
                 return d.Save(sd, o);
               });
    return py::cast(Unwrap(std::move(info)));
  }

  PendingSaveHandle SaveAsync(const py::object& state, const py::object& step,
                              const py::object& tag,
                              const py::object& metadata) {
    Result<std::shared_ptr<PendingSave>> pending =
        Saving(state, step, tag, metadata,
               [](DB& d, const StateDict& sd, const SaveOptions& o) {
                 return d.SaveAsync(sd, o);
               });
    return PendingSaveHandle(Unwrap(std::move(pending)));
  }

  LoadResult Load(const py::object& state, const py::object& step,
                  const py::object& tag, const py::object& id,
                  const py::object& strict, const py::object& cast) {
    CheckpointSelector which = CheckpointSelector::Latest();
    LoadOptions options;
    StateDict sd;
    Borrowed borrowed;
    Result<LoadResult> result = Collective(
        [&] {
          which = Unwrap(Selector(step, tag, id));
          options.strict = Unwrap(Flag(strict, "strict"));
          options.cast = Unwrap(Flag(cast, "cast"));
          Convert(StateDictArgument(state), true, sd, borrowed);
        },
        sd, InvalidStateDict,
        [&](DB& d, StateDict& given) { return d.Load(given, which, options); });
    // Also after a failed load, which may have written some targets.
    MarkWritten(borrowed.written_torch);
    LoadResult r = Unwrap(std::move(result));
    borrowed.values.WriteBack();
    return r;
  }

  std::vector<CheckpointInfo> Checkpoints() {
    return Unwrap(db()->ListCheckpoints());
  }

  py::dict Metadata(const py::object& step, const py::object& tag,
                    const py::object& id) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    CheckpointMetadata m = Unwrap(db()->GetMetadata(which));
    const GcPaused paused;  // thousands of dicts and lists, no cycle
    py::dict out;
    out["id"] = m.info.id;
    out["step"] = py::cast(m.info.step);
    out["tag"] = m.info.tag ? py::object(StoredText(*m.info.tag)) : py::none();
    out["created"] = m.info.created;
    out["world_size"] = m.info.world_size;
    // The keys of every tensor's and chunk's dict, made once.
    const py::str global_offset("global_offset"), local_shape("local_shape"),
        rank("rank"), nbytes("nbytes"), dtype("dtype"),
        global_shape("global_shape"), chunks_key("chunks");
    std::array<py::object, 256> dtype_names;  // by DType code, as met
    py::dict tensors;
    for (const auto& [key, t] : m.tensors) {
      py::list chunks(t.chunks.size());
      for (size_t i = 0; i < t.chunks.size(); ++i) {
        const ChunkMetadata& c = t.chunks[i];
        py::dict chunk;
        chunk[global_offset] = ShapeList(c.box.origin);
        chunk[local_shape] = ShapeList(c.box.shape);
        chunk[rank] = py::int_(c.writer_rank);
        chunk[nbytes] = py::int_(c.nbytes);
        chunks[i] = std::move(chunk);
      }
      py::dict tensor;
      py::object& name = dtype_names[static_cast<uint8_t>(t.dtype)];
      if (!name) name = py::str(DTypeName(t.dtype));
      tensor[dtype] = name;
      tensor[global_shape] = ShapeList(t.global_shape);
      tensor[chunks_key] = std::move(chunks);
      tensors[py::str(key)] = std::move(tensor);
    }
    out["tensors"] = tensors;
    py::dict mapping;
    for (const auto& [key, path] : m.flat_mapping) {
      auto kinds = m.path_kinds.find(key);
      mapping[py::str(key)] = PathParts(
          path, kinds == m.path_kinds.end() ? nullptr : &kinds->second);
    }
    out["flat_mapping"] = mapping;
    py::dict values;
    for (const auto& [key, v] : m.values) values[py::str(key)] = ToPython(v);
    out["values"] = values;
    py::dict user;
    for (const auto& [key, value] : m.user_metadata)
      user[StoredText(key)] = StoredText(value);
    out["user_metadata"] = user;
    return out;
  }

  py::array Read(const py::object& key, const py::object& step,
                 const py::object& tag, const py::object& id,
                 const py::object& index) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    const std::string flat = Unwrap(FlatKey(key));
    const TensorIndex part = Unwrap(IndexOf(index, flat));
    const std::shared_ptr<DB> d = db();
    ReadStats stats;
    Result<Tensor> read =
        WithoutGil([&] { return d->Read(flat, which, part, &stats); });
    auto* tensor = new Tensor(Unwrap(std::move(read)));
    last_read_bytes_ = stats.bytes_read;
    py::capsule owner(tensor, [](void* p) { delete static_cast<Tensor*>(p); });
    std::vector<py::ssize_t> shape(tensor->shape.begin(), tensor->shape.end());
    return py::array(ToNumpy(tensor->dtype), shape, tensor->data.data(), owner);
  }

  void Delete(const py::object& step, const py::object& tag,
              const py::object& id) {
    CheckpointSelector which;
    Check(Collective([&] { which = Unwrap(Selector(step, tag, id)); }, which,
                     &CheckpointSelector::Invalid,
                     [](DB& d, CheckpointSelector& w) { return d.Delete(w); }));
  }

  void Verify(const py::object& step, const py::object& tag,
              const py::object& id) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    const std::shared_ptr<DB> d = db();
    Status s = WithoutGil([&] { return d->Verify(which); });
    Check(s);
  }

  void Close() {
    const std::shared_ptr<DB> held = db_;
    if (!held) return;
    Status s = WithoutGil([&] { return held->Close(); });
    db_.reset();
    Check(s);
  }

  bool closed() const { return db_ == nullptr; }
  int rank() { return db()->communicator().rank(); }
  int size() { return db()->communicator().size(); }
  const std::string& path() const { return path_; }
  uint64_t last_read_bytes() const { return last_read_bytes_; }

 private:
  std::string path_;
  // Chunk bytes the last successful read() read.
  uint64_t last_read_bytes_ = 0;
  std::shared_ptr<DB> db_;
};

}  // namespace
}  // namespace ckptdb::python

namespace ckptdb::python {
namespace {

// CheckpointInfo, LoadStats and LoadResult, read-only views of the C++ values.
std::string CheckpointInfoRepr(const CheckpointInfo& i) {
  if (!i.damage.empty()) {
    return "CheckpointInfo(id=" + std::to_string(i.id) + ", damage='" +
           i.damage + "')";
  }
  const std::string tag =
      i.tag ? py::repr(StoredText(*i.tag)).cast<std::string>() : "None";
  return "CheckpointInfo(id=" + std::to_string(i.id) +
         ", step=" + (i.step ? std::to_string(*i.step) : "None") +
         ", tag=" + tag + ", world_size=" + std::to_string(i.world_size) +
         ", num_tensors=" + std::to_string(i.num_tensors) +
         ", nbytes=" + std::to_string(i.nbytes) +
         ", nbytes_written=" + std::to_string(i.nbytes_written) + ")";
}

void DefineCheckpointInfo(py::module_& m) {
  py::class_<CheckpointInfo>(m, "CheckpointInfo",
                             "A committed checkpoint's summary.")
      .def_readonly("id", &CheckpointInfo::id, "int, increasing within a store")
      .def_readonly("step", &CheckpointInfo::step,
                    "training step given at save, or None")
      .def_property_readonly(
          "tag",
          [](const CheckpointInfo& i) -> py::object {
            return i.tag ? py::object(StoredText(*i.tag)) : py::none();
          },
          "unique name given at save, or None")
      .def_readonly("created", &CheckpointInfo::created,
                    "unix seconds of the commit")
      .def_readonly("world_size", &CheckpointInfo::world_size,
                    "number of ranks that saved it")
      .def_readonly("num_tensors", &CheckpointInfo::num_tensors,
                    "number of tensors")
      .def_readonly("nbytes", &CheckpointInfo::nbytes,
                    "tensor bytes, each stored box counted once")
      .def_readonly("nbytes_written", &CheckpointInfo::nbytes_written,
                    "tensor bytes this checkpoint wrote; the rest of nbytes "
                    "it shares with earlier checkpoints")
      .def_readonly("references", &CheckpointInfo::references,
                    "ids of earlier checkpoints whose stored chunks it uses "
                    "(their chunks stay while it does, even once those "
                    "checkpoints are deleted)")
      .def_property_readonly(
          "damage",
          [](const CheckpointInfo& i) -> std::optional<std::string> {
            if (i.damage.empty()) return std::nullopt;
            return i.damage;
          },
          "None, or (when both copies of its record are damaged: only `id` "
          "is set) what is damaged; calls that need it raise CorruptionError")
      .def("__repr__", &CheckpointInfoRepr)
      // Equal when every field is: the same checkpoint listed twice.
      .def(
          "__eq__",
          [](const CheckpointInfo& a, py::object b) -> py::object {
            if (!py::isinstance<CheckpointInfo>(b))
              return py::reinterpret_borrow<py::object>(Py_NotImplemented);
            return py::bool_(a == b.cast<const CheckpointInfo&>());
          },
          py::is_operator())
      .def("__hash__",
           [](const CheckpointInfo& i) { return py::hash(py::int_(i.id)); });
}

void DefineResultTypes(py::module_& m) {
  DefineCheckpointInfo(m);
  py::class_<LoadStats>(m, "LoadStats", "What one rank's load moved.")
      .def_readonly("bytes_read", &LoadStats::bytes_read,
                    "chunk bytes this rank read from storage")
      .def_readonly("bytes_needed", &LoadStats::bytes_needed,
                    "bytes this rank's targets received")
      .def_readonly("bytes_sent", &LoadStats::bytes_sent,
                    "bytes this rank sent to other ranks")
      .def_readonly("device_bytes_sent", &LoadStats::device_bytes_sent,
                    "of bytes_sent, those sent device to device (NCCL)")
      .def_readonly("chunks_read", &LoadStats::chunks_read,
                    "chunks this rank read")
      .def("__repr__", [](const LoadStats& s) {
        return "LoadStats(bytes_read=" + std::to_string(s.bytes_read) +
               ", bytes_needed=" + std::to_string(s.bytes_needed) +
               ", bytes_sent=" + std::to_string(s.bytes_sent) +
               ", device_bytes_sent=" + std::to_string(s.device_bytes_sent) +
               ", chunks_read=" + std::to_string(s.chunks_read) + ")";
      });

  py::class_<LoadResult>(m, "LoadResult", "The outcome of DB.load.")
      .def_readonly("missing_keys", &LoadResult::missing_keys,
                    "requested keys the checkpoint lacks (strict=False), flat")
      .def_readonly("unexpected_keys", &LoadResult::unexpected_keys,
                    "stored keys that were not requested, flat")
      .def_readonly("stats", &LoadResult::stats, "LoadStats of this rank")
      .def("__repr__", [](const LoadResult& r) {
        return "LoadResult(missing_keys=" +
               std::string(py::repr(py::cast(r.missing_keys))) +
               ", unexpected_keys=" +
               std::string(py::repr(py::cast(r.unexpected_keys))) + ")";
      });
}

void DefineDB(py::module_& m) {
  py::class_<PendingSaveHandle>(m, "SaveHandle",
                                "A save running in the background.")
      .def("done", &PendingSaveHandle::Done)
      .def("wait", &PendingSaveHandle::Wait);
  py::class_<PyCommunicator>(m, "Communicator",
                             "A communicator made by ckptdb._comm.")
      .def_property_readonly(
          "rank", [](const PyCommunicator& c) { return c.comm->rank(); })
      .def_property_readonly(
          "size", [](const PyCommunicator& c) { return c.comm->size(); });
  m.def("gloo_communicator", &MakeGlooCommunicator, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("prefix"),
        py::arg("interface") = "", py::arg("timeout_seconds") = 0.0,
        "Connects the members of a group through `store` (collective over "
        "them) and returns this rank's gloo communicator.");

  py::class_<PyDB>(m, "DB", "An open store; see ckptdb.open.")
      .def(py::init<const std::string&, const py::object&, const py::object&,
                    const py::object&, const py::dict&>(),
           py::arg("path"), py::arg("comm"), py::arg("create"),
           py::arg("read_only"), py::arg("options"))
      .def("save", &PyDB::Save, py::arg("state_dict"), py::kw_only(),
           py::arg("step") = py::none(), py::arg("tag") = py::none(),
           py::arg("metadata") = py::none())
      .def("save_async", &PyDB::SaveAsync, py::arg("state_dict"), py::kw_only(),
           py::arg("step") = py::none(), py::arg("tag") = py::none(),
           py::arg("metadata") = py::none())
      .def("load", &PyDB::Load, py::arg("state_dict"), py::kw_only(),
           py::arg("step") = py::none(), py::arg("tag") = py::none(),
           py::arg("id") = py::none(), py::arg("strict") = true,
           py::arg("cast") = false)
      .def("checkpoints", &PyDB::Checkpoints)
      .def("metadata", &PyDB::Metadata, py::kw_only(),
           py::arg("step") = py::none(), py::arg("tag") = py::none(),
           py::arg("id") = py::none())
      .def("read", &PyDB::Read, py::arg("key"), py::kw_only(),
           py::arg("step") = py::none(), py::arg("tag") = py::none(),
           py::arg("id") = py::none(), py::arg("index") = py::none())
      .def("delete", &PyDB::Delete, py::kw_only(), py::arg("step") = py::none(),
           py::arg("tag") = py::none(), py::arg("id") = py::none())
      .def("verify", &PyDB::Verify, py::kw_only(), py::arg("step") = py::none(),
           py::arg("tag") = py::none(), py::arg("id") = py::none())
      .def("close", &PyDB::Close)
      .def_property_readonly("closed", &PyDB::closed)
      .def_property_readonly("rank", &PyDB::rank)
      .def_property_readonly("size", &PyDB::size)
      .def_property_readonly("path", &PyDB::path)
      .def_property_readonly("last_read_bytes", &PyDB::last_read_bytes);
}

}  // namespace
}  // namespace ckptdb::python

PYBIND11_MODULE(_ckptdb, m) {
  using namespace ckptdb;
  using namespace ckptdb::python;
  m.doc() = "C++ core of ckptdb; use the ckptdb package.";

  m.def(
      "_register",
      [](py::object error, py::object not_found, py::object invalid,
         py::object corruption, py::object shard) {
        classes() = {error,   not_found,
                     invalid, corruption,
                     shard,   py::module_::import("numpy").attr("generic")};
      },
      "Called once by ckptdb/__init__.py with the package's classes.");
  m.def(
      "_register_flat_shard",
      [](py::object flat_shard) { classes().flat_shard = flat_shard; },
      "Called once by ckptdb/__init__.py with the FlatShard class.");
  m.def("version", &Version, "The ckptdb library version.");
  m.def(
      "_fail_open",
      [](const py::object& comm, const std::string& error) {
        FailOpen(CommunicatorOf(comm), error);
      },
      py::arg("comm"), py::arg("error"),
      "Takes part in the open of the other ranks of `comm`, failing it on "
      "every rank with `error` (this rank's arguments were bad).");

  DefineResultTypes(m);
  DefineDB(m);
}
