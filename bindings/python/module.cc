// _ckptdb: the C++ side of the Python package (bindings/python/ckptdb). Turns
// nested dicts of numpy arrays, DLPack tensors, Shards and small values into
// StateDicts of borrowed views (zero copy), runs DB calls without the GIL, and
// raises the package's exception classes.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <optional>

#include "bindings/python/arguments.h"
#include "bindings/python/containers.h"
#include "ckptdb/db.h"
#include "ckptdb/mpi.h"
#include "mpi4py/mpi4py.h"

namespace py = pybind11;

namespace ckptdb::python {
namespace {

// DLPack type codes newer than the dlpack.h Debian ships (0.6).
constexpr uint8_t kDLBoolCode = 6;
constexpr uint8_t kDLFloat8E4M3FNCode = 10;
constexpr uint8_t kDLFloat8E5M2Code = 12;

// The package's Python classes, registered by ckptdb/__init__.py at import.
struct Classes {
  py::object error, not_found, invalid_argument, corruption, shard;
  py::object numpy_scalar;  // numpy.generic
  py::object flat_shard;
};
Classes& classes() {
  static auto* c =
      new Classes();  // never destroyed: outlives the interpreter's teardown
  return *c;
}

[[noreturn]] void Raise(const Status& s) {
  const Classes& c = classes();
  py::object cls =
      s.IsNotFound() ? c.not_found
      : s.IsInvalidArgument() || s.code() == StatusCode::kAlreadyExists
          ? c.invalid_argument
      : s.IsCorruption() ? c.corruption
                         : c.error;
  // Messages may quote bytes that are not UTF-8 (a path): escaped, not lost.
  PyObject* message = PyUnicode_DecodeUTF8(
      s.message().data(), static_cast<Py_ssize_t>(s.message().size()),
      "backslashreplace");
  if (message != nullptr) {
    PyErr_SetObject(cls.ptr(), message);
    Py_DECREF(message);
  }
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

[[noreturn]] void Invalid(const std::string& message) {
  Raise(Status::InvalidArgument(message));
}

// A path as messages show it: quoted, its middle elided when it is long (a
// path of a thousand levels).
std::string Where(const std::string& path) {
  if (path.empty()) return "the state dict";
  constexpr size_t kHead = 96, kTail = 64;
  if (path.size() <= kHead + kTail + 32) return "'" + path + "'";
  return "'" + path.substr(0, kHead) + "...(" +
         std::to_string(path.size() - kHead - kTail) + " more characters)..." +
         path.substr(path.size() - kTail) + "'";
}

// ---- dtypes -----------------------------------------------------------------

// numpy has no bfloat16 or float8: those cross numpy as uint16 / uint8 raw
// bits.
std::optional<DType> FromNumpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f') {
    if (size == 8) return DType::kFloat64;
    if (size == 4) return DType::kFloat32;
    if (size == 2) return DType::kFloat16;
  } else if (kind == 'i') {
    if (size == 8) return DType::kInt64;
    if (size == 4) return DType::kInt32;
    if (size == 2) return DType::kInt16;
    if (size == 1) return DType::kInt8;
  } else if (kind == 'u') {
    if (size == 1) return DType::kUInt8;
    if (size == 2) return DType::kBFloat16;  // raw bits
  } else if (kind == 'b') {
    return DType::kBool;
  }
  return std::nullopt;
}

py::dtype ToNumpy(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return py::dtype("float64");
    case DType::kFloat32:
      return py::dtype("float32");
    case DType::kFloat16:
      return py::dtype("float16");
    case DType::kBFloat16:
      return py::dtype("uint16");
    case DType::kInt64:
      return py::dtype("int64");
    case DType::kInt32:
      return py::dtype("int32");
    case DType::kInt16:
      return py::dtype("int16");
    case DType::kInt8:
      return py::dtype("int8");
    case DType::kUInt8:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
      return py::dtype("uint8");
    case DType::kBool:
      return py::dtype("bool");
  }
  return py::dtype("uint8");
}

std::optional<DType> FromDLPack(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 64) return DType::kFloat64;
      if (t.bits == 32) return DType::kFloat32;
      if (t.bits == 16) return DType::kFloat16;
      break;
    case kDLBfloat:
      if (t.bits == 16) return DType::kBFloat16;
      break;
    case kDLInt:
      if (t.bits == 64) return DType::kInt64;
      if (t.bits == 32) return DType::kInt32;
      if (t.bits == 16) return DType::kInt16;
      if (t.bits == 8) return DType::kInt8;
      break;
    case kDLUInt:
      if (t.bits == 8) return DType::kUInt8;
      break;
    case kDLBoolCode:
      if (t.bits == 8) return DType::kBool;
      break;
    case kDLFloat8E4M3FNCode:
      if (t.bits == 8) return DType::kFloat8E4M3FN;
      break;
    case kDLFloat8E5M2Code:
      if (t.bits == 8) return DType::kFloat8E5M2;
      break;
  }
  return std::nullopt;
}

// ---- leaves -----------------------------------------------------------------

// What a conversion borrows: Python objects kept alive while views point into
// them, and where each small value of the state sits (for load's write-back).
struct Borrowed {
  std::vector<py::object> keep;
  ValueSlots values;
};

Shape ShapeOf(const py::handle& seq, const std::string& path,
              const char* what) {
  const std::string name = "tensor " + Where(path) + ": Shard " + what;
  if (!PyTuple_Check(seq.ptr()) && !PyList_Check(seq.ptr())) {
    Invalid(name + " must be a tuple of ints, got " + TypeName(seq));
  }
  Shape shape;
  for (py::handle d : seq) shape.push_back(Unwrap(Int(d, name + " item")));
  return shape;
}

// Element strides from the byte strides of an array of `shape` (numpy), or
// none when it is C-contiguous. Negative strides (a reversed view) and strides
// that are not whole elements are refused.
Shape ElementStridesOf(const Shape& shape, const int64_t* strides, int64_t unit,
                       const std::string& path) {
  Shape out(shape.size());
  bool dense = true;
  int64_t expected = unit;
  for (size_t d = shape.size(); d-- > 0;) {
    if (strides[d] < 0) {
      Invalid("tensor " + Where(path) +
              ": negative strides (a reversed view) are not supported; pass a "
              "copy");
    }
    if (strides[d] % unit != 0) {
      Invalid("tensor " + Where(path) + ": strides of " +
              std::to_string(strides[d]) + " bytes are not whole elements of " +
              std::to_string(unit) + " bytes");
    }
    out[d] = strides[d] / unit;
    if (shape[d] != 1 && strides[d] != expected) dense = false;
    expected *= shape[d];
  }
  if (dense || NumElements(shape) == 0) return {};
  return out;
}

// A view of a numpy array's memory.
TensorView FromArray(const py::array& array, const std::string& path,
                     bool writable) {
  if (writable && !array.writeable())
    Invalid("tensor " + Where(path) + ": the array is read-only");
  std::optional<DType> dtype = FromNumpy(array.dtype());
  if (!dtype) {
    Invalid("tensor " + Where(path) + ": numpy dtype " +
            py::str(array.dtype()).cast<std::string>() +
            " is not supported (float64 float32 float16 int64 int32 int16 int8 "
            "uint8 bool, "
            "uint16 for bfloat16 bits)");
  }
  Shape shape(array.shape(), array.shape() + array.ndim());
  const std::vector<int64_t> byte_strides(array.strides(),
                                          array.strides() + array.ndim());
  Shape strides = ElementStridesOf(
      shape, byte_strides.data(), static_cast<int64_t>(array.itemsize()), path);
  return TensorView::Whole(const_cast<void*>(array.data()), *dtype,
                           std::move(shape))
      .WithStrides(std::move(strides));
}

// A view of a DLPack tensor's memory; the capsule is kept in `borrowed`.
TensorView FromDLPackObject(const py::object& obj, const std::string& path,
                            Borrowed& borrowed) {
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    // The producer refuses to export it (torch: a tensor that requires grad).
    if (!e.matches(PyExc_Exception) || e.matches(PyExc_MemoryError)) throw;
    const std::string message = "tensor " + Where(path) +
                                ": its __dlpack__() raised " +
                                TypeName(e.value()) + ": " + Str(e.value());
    py::raise_from(e, classes().invalid_argument.ptr(), message.c_str());
    throw py::error_already_set();
  }
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    Invalid("tensor " + Where(path) +
            ": __dlpack__ did not return an unused DLPack capsule");
  }
  auto* managed = static_cast<DLManagedTensor*>(
      PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  borrowed.keep.push_back(
      capsule);  // its destructor calls the producer's deleter
  const DLTensor& t = managed->dl_tensor;
  Device device;
  if (t.device.device_type == kDLCUDA ||
      t.device.device_type == kDLCUDAManaged) {
    // The library checks that it can use the device, and waits for the
    // producer's queued work on it (DB::Save, DB::Load).
    device = {DeviceType::kCUDA, static_cast<int>(t.device.device_id)};
  } else if (t.device.device_type != kDLCPU &&
             t.device.device_type != kDLCUDAHost) {
    Invalid("tensor " + Where(path) + ": DLPack device type " +
            std::to_string(t.device.device_type) +
            " is not supported (CPU and CUDA only)");
  }
  std::optional<DType> dtype = FromDLPack(t.dtype);
  if (!dtype) {
    Invalid("tensor " + Where(path) + ": DLPack dtype (code " +
            std::to_string(t.dtype.code) + ", " + std::to_string(t.dtype.bits) +
            " bits, " + std::to_string(t.dtype.lanes) +
            " lanes) is not supported");
  }
  Shape shape(t.shape, t.shape + t.ndim);
  // DLPack strides count elements (none: C-contiguous).
  Shape strides;
  if (t.strides != nullptr)
    strides = ElementStridesOf(shape, t.strides, 1, path);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return TensorView::Whole(data, *dtype, std::move(shape), device)
      .WithStrides(std::move(strides));
}

// A view of any tensor leaf: numpy array, DLPack object, or Shard of one.
TensorView TensorLeaf(const py::object& obj, const std::string& path,
                      bool writable, Borrowed& borrowed);

void Reinterpret(const py::object& shard, const std::string& path,
                 TensorView& view);

TensorView FromShard(const py::object& shard, const std::string& path,
                     bool writable, Borrowed& borrowed) {
  TensorView view = TensorLeaf(shard.attr("data"), path, writable, borrowed);
  view.global_shape = ShapeOf(shard.attr("global_shape"), path, "global_shape");
  view.global_offset =
      ShapeOf(shard.attr("global_offset"), path, "global_offset");
  Reinterpret(shard, path, view);
  return view;
}

// A Shard's or FlatShard's `dtype`: the data's bits read as that dtype.
void Reinterpret(const py::object& shard, const std::string& path,
                 TensorView& view) {
  py::object dtype = shard.attr("dtype");
  if (!dtype.is_none()) {
    const std::string name =
        Unwrap(Text(dtype, "tensor " + Where(path) + ": Shard dtype"));
    Result<DType> as = DTypeFromName(name);
    if (!as.ok())
      Invalid("tensor " + Where(path) + ": " + as.status().message());
    if (DTypeSize(*as) != DTypeSize(view.dtype)) {
      Invalid("tensor " + Where(path) + ": dtype " + name + " has " +
              std::to_string(DTypeSize(*as)) +
              "-byte elements but the data has " +
              std::to_string(DTypeSize(view.dtype)));
    }
    view.dtype = *as;  // the same bits, read as `name`
  }
}

// A FlatShard: its 1-D data as elements [flat_offset, + n) of the flattening.
TensorView FromFlatShard(const py::object& shard, const std::string& path,
                         bool writable, Borrowed& borrowed) {
  TensorView view = TensorLeaf(shard.attr("data"), path, writable, borrowed);
  if (view.local_shape.size() != 1) {
    Invalid("tensor " + Where(path) +
            ": FlatShard data must be 1-D, got shape " +
            ShapeToString(view.local_shape));
  }
  view.global_shape = ShapeOf(shard.attr("global_shape"), path, "global_shape");
  view.global_offset.clear();
  view.flat_offset = Unwrap(Int(shard.attr("flat_offset"),
                                "tensor " + Where(path) + ": flat_offset"));
  Reinterpret(shard, path, view);
  return view;
}

TensorView TensorLeaf(const py::object& obj, const std::string& path,
                      bool writable, Borrowed& borrowed) {
  const py::object& flat = classes().flat_shard;
  if (classes().shard && py::isinstance(obj, classes().shard)) {
    if (py::isinstance(obj.attr("data"), classes().shard) ||
        (flat && py::isinstance(obj.attr("data"), flat)))
      Invalid("tensor " + Where(path) + ": a Shard of a Shard");
    return FromShard(obj, path, writable, borrowed);
  }
  if (flat && py::isinstance(obj, flat)) {
    if (py::isinstance(obj.attr("data"), flat) ||
        py::isinstance(obj.attr("data"), classes().shard))
      Invalid("tensor " + Where(path) + ": a FlatShard of a Shard");
    return FromFlatShard(obj, path, writable, borrowed);
  }
  borrowed.keep.push_back(obj);
  if (py::isinstance<py::array>(obj))
    return FromArray(obj.cast<py::array>(), path, writable);
  if (!py::hasattr(obj, "__dlpack__")) {
    Invalid("tensor " + Where(path) +
            ": Shard data must be a numpy array or a DLPack tensor (an object "
            "with __dlpack__), got " +
            TypeName(obj));
  }
  return FromDLPackObject(obj, path, borrowed);
}

std::optional<Value> SmallValue(const py::handle& obj,
                                const std::string& path) {
  if (obj.is_none()) return Value(None{});
  if (py::isinstance<py::bool_>(obj)) return Value(obj.cast<bool>());
  if (py::isinstance<py::int_>(obj)) {
    try {
      return Value(obj.cast<int64_t>());
    } catch (const py::cast_error&) {
      Invalid("value " + Where(path) + ": int does not fit in 64 bits");
    }
  }
  if (py::isinstance<py::float_>(obj)) return Value(obj.cast<double>());
  if (py::isinstance<py::str>(obj))
    return Value(Unwrap(Text(obj, "value " + Where(path))));
  if (py::isinstance<py::bytes>(obj))
    return Value(Bytes{obj.cast<std::string>()});
  // numpy scalars (numpy.int64(3), numpy.float32(0.5), numpy.bool_): their
  // Python value.
  if (py::isinstance(obj, classes().numpy_scalar)) {
    return SmallValue(obj.attr("item")(), path);
  }
  return std::nullopt;
}

bool IsTensorLeaf(const py::handle& obj) {
  return py::isinstance<py::array>(obj) ||
         (classes().shard && py::isinstance(obj, classes().shard)) ||
         (classes().flat_shard && py::isinstance(obj, classes().flat_shard)) ||
         py::hasattr(obj, "__dlpack__");
}

// The containers from the state dict down to the one being converted, with
// their paths: a container met again among them is a cycle.
using Ancestors = std::vector<std::pair<PyObject*, std::string>>;

// Refuses to descend into `child` (at `path`) when it is one of `ancestors`
// or would nest deeper than kMaxNesting containers.
void CheckDescent(const py::handle& child, const std::string& path,
                  const Ancestors& ancestors) {
  for (const auto& [container, where] : ancestors) {
    if (container == child.ptr()) {
      Invalid("the state dict contains itself: " + Where(path) + " is " +
              Where(where) + ", which holds it");
    }
  }
  if (ancestors.size() >= kMaxNesting) {
    Invalid("the state dict nests deeper than " + std::to_string(kMaxNesting) +
            " levels at " + Where(path));
  }
}

// The container kind of a dict, list or tuple; nullopt for anything else.
std::optional<ContainerKind> ContainerOf(const py::handle& obj) {
  if (PyDict_Check(obj.ptr())) return ContainerKind::kDict;
  if (PyList_Check(obj.ptr())) return ContainerKind::kList;
  if (PyTuple_Check(obj.ptr())) return ContainerKind::kTuple;
  return std::nullopt;
}

// Converts a Python state dict into a StateDict of borrowed views.
class Converter {
 public:
  Converter(bool writable, Borrowed& borrowed, const py::dict& root)
      : writable_(writable), borrowed_(borrowed) {
    ancestors_.emplace_back(root.ptr(), "");
  }

  // Builds `out` from the container `obj` at `path`, the last of the
  // ancestors; `tuple` is its recorded tuple id when it is a tuple.
  void Container(const py::handle& obj, const std::string& path, int tuple,
                 StateDict& out) {
    if (PyDict_Check(obj.ptr())) {
      for (auto [key, item] : py::reinterpret_borrow<py::dict>(obj)) {
        Key k = Unwrap(DictKey(key, Where(path)));
        Item(obj, py::reinterpret_borrow<py::object>(key), std::move(k),
             py::reinterpret_borrow<py::object>(item), path, tuple, out);
      }
      return;
    }
    const py::sequence items = py::reinterpret_borrow<py::sequence>(obj);
    for (size_t i = 0; i < items.size(); ++i) {
      Item(obj, py::int_(i), Key(static_cast<int64_t>(i)), items[i], path,
           tuple, out);
    }
  }

 private:
  // Converts item `key` (`k`) of `container` at `path` into `out`.
  void Item(const py::handle& container, const py::object& key, Key k,
            const py::object& value, const std::string& path, int tuple,
            StateDict& out) {
    const std::string text = KeyText(k);
    const std::string here = path.empty() ? text : path + "." + text;
    if (std::optional<ContainerKind> kind = ContainerOf(value)) {
      CheckDescent(value, here, ancestors_);
      int child_tuple = ValueSlots::kNoTuple;
      if (*kind == ContainerKind::kTuple) {
        child_tuple = borrowed_.values.AddTuple(
            py::reinterpret_borrow<py::object>(container), key, tuple, value);
      }
      ancestors_.emplace_back(value.ptr(), here);
      Container(value, here, child_tuple, out.Child(k, *kind));
      ancestors_.pop_back();
    } else if (IsTensorLeaf(value) &&
               !py::isinstance(value, classes().numpy_scalar)) {
      out.Set(std::move(k), TensorLeaf(value, here, writable_, borrowed_));
    } else if (std::optional<Value> v = SmallValue(value, here)) {
      out.Set(k, std::move(*v));
      borrowed_.values.AddValue(py::reinterpret_borrow<py::object>(container),
                                key, tuple, out.GetValue(k));
    } else {
      Invalid("leaf " + Where(here) + " has unsupported type " +
              TypeName(value) +
              " (arrays, DLPack tensors, Shard, int, float, bool, str, bytes, "
              "None, numpy scalars, or dict, list and tuple of them)");
    }
  }

  const bool writable_;
  Borrowed& borrowed_;
  Ancestors ancestors_;
};

// Converts the state dict `dict` into `out`.
void Convert(const py::dict& dict, bool writable, StateDict& out,
             Borrowed& borrowed) {
  Converter(writable, borrowed, dict)
      .Container(dict, "", ValueSlots::kNoTuple, out);
}

py::list ShapeList(const Shape& s) {
  py::list out;
  for (int64_t d : s) out.append(d);
  return out;
}

// ---- the DB -----------------------------------------------------------------

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

class PyDB {
 public:
  // `path`: bytes (os.fsencode) or str.
  PyDB(const std::string& path, const py::object& comm,
       const py::object& create, const py::object& read_only,
       const py::dict& options)
      : path_(path) {
    if (path.find('\0') != std::string::npos)
      Invalid("path " + Repr(py::bytes(path)) + " contains a NUL character");
    const Options o = Unwrap(OpenOptions(create, read_only, options));
    std::shared_ptr<Communicator> communicator;
    if (!comm.is_none()) {
      if (!PyObject_TypeCheck(comm.ptr(), &PyMPIComm_Type)) {
        Invalid(
            "comm must be an mpi4py communicator (mpi4py.MPI.Comm) or None");
      }
      communicator = Unwrap(MpiCommunicator(*PyMPIComm_Get(comm.ptr())));
    }
    Result<std::unique_ptr<DB>> db =
        WithoutGil([&] { return DB::Open(o, path, std::move(communicator)); });
    db_ = Unwrap(std::move(db));
  }

  DB& db() {
    if (!db_)
      Raise(Status::FailedPrecondition("store '" + path_ + "' is closed"));
    return *db_;
  }

  // The arguments of save and save_async, converted; `call` runs without the
  // GIL while the state's arrays are borrowed.
  template <typename Call>
  auto Saving(const py::object& state, const py::object& step,
              const py::object& tag, const py::object& metadata, Call&& call) {
    SaveOptions options;
    options.step = Unwrap(OptionalInt(step, "step"));
    options.tag = Unwrap(OptionalText(tag, "tag"));
    if (!metadata.is_none())
      options.user_metadata = Unwrap(TextMap(metadata, "metadata"));
    const py::dict dict = StateDictArgument(state);
    StateDict sd;
    Borrowed borrowed;
    Convert(dict, false, sd, borrowed);
    DB& d = db();
    return WithoutGil([&] { return call(d, sd, options); });
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
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    const LoadOptions options{.strict = Unwrap(Flag(strict, "strict")),
                              .cast = Unwrap(Flag(cast, "cast"))};
    const py::dict dict = StateDictArgument(state);
    StateDict sd;
    Borrowed borrowed;
    Convert(dict, true, sd, borrowed);
    DB& d = db();
    Result<LoadResult> result =
        WithoutGil([&] { return d.Load(sd, which, options); });
    LoadResult r = Unwrap(std::move(result));
    borrowed.values.WriteBack();
    return r;
  }

  std::vector<CheckpointInfo> Checkpoints() {
    return Unwrap(db().ListCheckpoints());
  }

  py::dict Metadata(const py::object& step, const py::object& tag,
                    const py::object& id) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    CheckpointMetadata m = Unwrap(db().GetMetadata(which));
    py::dict out;
    out["id"] = m.info.id;
    out["step"] = py::cast(m.info.step);
    out["tag"] = py::cast(m.info.tag);
    out["created"] = m.info.created;
    out["world_size"] = m.info.world_size;
    py::dict tensors;
    for (const auto& [key, t] : m.tensors) {
      py::list chunks;
      for (const ChunkMetadata& c : t.chunks) {
        py::dict chunk;
        chunk["global_offset"] = ShapeList(c.global_offset);
        chunk["local_shape"] = ShapeList(c.local_shape);
        chunk["rank"] = c.writer_rank;
        chunk["nbytes"] = c.nbytes;
        chunks.append(chunk);
      }
      py::dict tensor;
      tensor["dtype"] = std::string(DTypeName(t.dtype));
      tensor["global_shape"] = ShapeList(t.global_shape);
      tensor["chunks"] = chunks;
      tensors[py::str(key)] = tensor;
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
    out["user_metadata"] = py::cast(m.user_metadata);
    return out;
  }

  py::array Read(const py::object& key, const py::object& step,
                 const py::object& tag, const py::object& id,
                 const py::object& index) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    const std::string flat = Unwrap(FlatKey(key));
    const TensorIndex part = Unwrap(IndexOf(index, flat));
    DB& d = db();
    ReadStats stats;
    Result<Tensor> read =
        WithoutGil([&] { return d.Read(flat, which, part, &stats); });
    auto* tensor = new Tensor(Unwrap(std::move(read)));
    last_read_bytes_ = stats.bytes_read;
    py::capsule owner(tensor, [](void* p) { delete static_cast<Tensor*>(p); });
    std::vector<py::ssize_t> shape(tensor->shape.begin(), tensor->shape.end());
    return py::array(ToNumpy(tensor->dtype), shape, tensor->data.data(), owner);
  }

  void Delete(const py::object& step, const py::object& tag,
              const py::object& id) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    DB& d = db();
    Status s = WithoutGil([&] { return d.Delete(which); });
    Check(s);
  }

  void Verify(const py::object& step, const py::object& tag,
              const py::object& id) {
    const CheckpointSelector which = Unwrap(Selector(step, tag, id));
    DB& d = db();
    Status s = WithoutGil([&] { return d.Verify(which); });
    Check(s);
  }

  void Close() {
    if (!db_) return;
    Status s = WithoutGil([&] { return db_->Close(); });
    db_.reset();
    Check(s);
  }

  bool closed() const { return db_ == nullptr; }
  int rank() { return db().communicator().rank(); }
  int size() { return db().communicator().size(); }
  const std::string& path() const { return path_; }
  uint64_t last_read_bytes() const { return last_read_bytes_; }

 private:
  std::string path_;
  // Chunk bytes the last successful read() read.
  uint64_t last_read_bytes_ = 0;
  std::unique_ptr<DB> db_;
};

}  // namespace
}  // namespace ckptdb::python

namespace ckptdb::python {
namespace {

// CheckpointInfo, LoadStats and LoadResult, read-only views of the C++ values.
void DefineResultTypes(py::module_& m) {
  py::class_<CheckpointInfo>(m, "CheckpointInfo",
                             "A committed checkpoint's summary.")
      .def_readonly("id", &CheckpointInfo::id, "int, increasing within a store")
      .def_readonly("step", &CheckpointInfo::step,
                    "training step given at save, or None")
      .def_readonly("tag", &CheckpointInfo::tag,
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
                    "ids of earlier checkpoints whose stored chunks it uses")
      .def("__repr__", [](const CheckpointInfo& i) {
        return "CheckpointInfo(id=" + std::to_string(i.id) +
               ", step=" + (i.step ? std::to_string(*i.step) : "None") +
               ", tag=" + (i.tag ? "'" + *i.tag + "'" : "None") +
               ", world_size=" + std::to_string(i.world_size) +
               ", num_tensors=" + std::to_string(i.num_tensors) +
               ", nbytes=" + std::to_string(i.nbytes) +
               ", nbytes_written=" + std::to_string(i.nbytes_written) + ")";
      });

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
                    "chunks this rank read");

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
  if (import_mpi4py() < 0) throw py::error_already_set();
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

  DefineResultTypes(m);
  DefineDB(m);
}
