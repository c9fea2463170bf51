#include "bindings/python/state_dicts.h"

#include <dlpack/dlpack.h>

#include <bit>
#include <climits>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include "bindings/python/arguments.h"
#include "bindings/python/containers.h"
#include "bindings/python/errors.h"

namespace ckptdb::python {
namespace {

namespace py = pybind11;

// Where a leaf sits: its container's dotted path and its key, joined only
// when an error names it (a state dict of many tensors converts every leaf).
class LeafPath {
 public:
  LeafPath(const std::string& parent, const Key& key)
      : parent_(parent), key_(&key) {}
  // A path already joined.
  LeafPath(const std::string& whole) : parent_(whole) {}  // NOLINT

  operator std::string() const {  // NOLINT: what Where() and messages take
    if (key_ == nullptr) return parent_;
    return parent_.empty() ? KeyText(*key_) : parent_ + "." + KeyText(*key_);
  }

 private:
  const std::string& parent_;
  const Key* key_ = nullptr;
};

// DLPack type codes newer than the dlpack.h Debian ships (0.6).
constexpr uint8_t kDLBoolCode = 6;
constexpr uint8_t kDLFloat8E4M3FNCode = 10;
constexpr uint8_t kDLFloat8E5M2Code = 12;

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
    if (size == 4) return DType::kUInt32;
    if (size == 8) return DType::kUInt64;
  } else if (kind == 'b') {
    return DType::kBool;
  }
  return std::nullopt;
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
      if (t.bits == 32) return DType::kUInt32;
      if (t.bits == 64) return DType::kUInt64;
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

Shape ShapeOf(const py::handle& seq, const LeafPath& path, const char* what) {
  auto name = [&] { return "tensor " + Where(path) + ": Shard " + what; };
  if (!PyTuple_Check(seq.ptr()) && !PyList_Check(seq.ptr())) {
    Invalid(name() + " must be a tuple of ints, got " + TypeName(seq));
  }
  Shape shape;
  for (py::handle d : seq) {
    // A plain int, the common item, before any name is built.
    if (PyLong_CheckExact(d.ptr())) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(d.ptr(), &overflow);
      if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
        shape.push_back(static_cast<int64_t>(v));
        continue;
      }
      PyErr_Clear();
    }
    shape.push_back(Unwrap(Int(d, name() + " item")));
  }
  return shape;
}

// Element strides from the byte strides of an array of `shape` (numpy), or
// none when it is C-contiguous. Negative strides (a reversed view; saved
// numpy arrays are copied before) and strides that are not whole elements
// are refused. A dimension of extent 1 takes the dense stride: its stride
// addresses nothing.
Shape ElementStridesOf(const Shape& shape, const int64_t* strides, int64_t unit,
                       const LeafPath& path, bool writable) {
  Shape out(shape.size());
  bool dense = true;
  int64_t expected = unit;
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t stride = shape[d] > 1 ? strides[d] : expected;
    if (stride < 0) {
      Invalid("tensor " + Where(path) +
              (writable ? ": a load target with negative strides (a reversed "
                          "view) cannot be filled in place; load into a copy "
                          "and assign it back"
                        : ": negative strides (a reversed view) are not "
                          "supported for this kind of tensor; pass a copy"));
    }
    if (stride % unit != 0) {
      Invalid("tensor " + Where(path) + ": strides of " +
              std::to_string(stride) + " bytes are not whole elements of " +
              std::to_string(unit) + " bytes");
    }
    out[d] = stride / unit;
    if (stride != expected) dense = false;
    expected *= shape[d];
  }
  if (dense || NumElements(shape) == 0) return {};
  return out;
}

// Whether a numpy dtype's bytes are in the machine's order (numpy's
// dtype.isnative; read from the descriptor without a Python call, except for
// a structured dtype, whose fields carry their own orders).
bool IsNativeOrder(const py::dtype& dtype) {
  if (dtype.has_fields()) return dtype.attr("isnative").cast<bool>();
  const char swapped = std::endian::native == std::endian::little ? '>' : '<';
  return dtype.byteorder() != swapped;
}

// Whether a numpy array has a negative stride on a dimension longer than 1
// (a reversed view).
bool HasNegativeStride(const py::array& array) {
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    if (array.strides(d) < 0 && array.shape(d) > 1) return true;
  }
  return false;
}

TensorView FromArray(const py::array& array, const LeafPath& path,
                     bool writable, Borrowed& borrowed);

// A reversed view to save: its values, copied in order (the library's views
// take only strides >= 0). A load target cannot be one: it is filled in place.
TensorView FromReversedArray(const py::array& array, const LeafPath& path,
                             Borrowed& borrowed) {
  py::object copy =
      py::module_::import("numpy").attr("ascontiguousarray")(array);
  borrowed.keep.push_back(copy);
  return FromArray(copy.cast<py::array>(), path, false, borrowed);
}

// A view of a numpy array's memory (of a copy of a reversed view to save,
// which `borrowed` keeps).
TensorView FromArray(const py::array& array, const LeafPath& path,
                     bool writable, Borrowed& borrowed) {
  if (!writable && HasNegativeStride(array))
    return FromReversedArray(array, path, borrowed);
  if (writable && !array.writeable())
    Invalid("tensor " + Where(path) + ": the array is read-only");
  // Stored bytes are in the machine's byte order: bytes of the other order
  // would be stored, and loaded, under the wrong label.
  const py::dtype dtype_of = array.dtype();
  if (!IsNativeOrder(dtype_of)) {
    Invalid("tensor " + Where(path) + ": numpy dtype " +
            py::str(array.dtype()).cast<std::string>() +
            " is in non-native byte order, which ckptdb does not store; " +
            (writable ? "load into" : "save") +
            " array.astype(array.dtype.newbyteorder('='))" +
            (writable ? " and copy it back" : ""));
  }
  std::optional<DType> dtype = FromNumpy(dtype_of);
  if (!dtype) {
    Invalid("tensor " + Where(path) + ": numpy dtype " +
            py::str(array.dtype()).cast<std::string>() +
            " is not supported (float64 float32 float16 int64 int32 int16 int8 "
            "uint64 uint32 uint8 bool, uint16 for bfloat16 bits)");
  }
  Shape shape(array.shape(), array.shape() + array.ndim());
  static_assert(sizeof(py::ssize_t) == sizeof(int64_t));
  Shape strides =
      ElementStridesOf(shape, reinterpret_cast<const int64_t*>(array.strides()),
                       static_cast<int64_t>(array.itemsize()), path, writable);
  TensorView view = TensorView::Whole(const_cast<void*>(array.data()), *dtype,
                                      std::move(shape));
  view.strides = std::move(strides);
  return view;
}

// A torch tensor of bools in host memory: torch before 2.1 refuses to export
// those through DLPack, but its numpy view shares the tensor's memory.
bool IsHostTorchBool(const py::object& obj) {
  try {
    return py::hasattr(obj, "numpy") &&
           Str(obj.attr("dtype")) == "torch.bool" &&
           Str(obj.attr("device")) == "cpu";
  } catch (py::error_already_set&) {
    return false;
  }
}

// Whether `obj` is a torch tensor that requires grad (and can be detached).
bool RequiresGrad(const py::object& obj) {
  try {
    return py::hasattr(obj, "requires_grad") && py::hasattr(obj, "detach") &&
           obj.attr("requires_grad").cast<bool>();
  } catch (py::error_already_set&) {
    return false;
  } catch (const py::cast_error&) {
    return false;
  }
}

// A DLPack dtype's usual name (complex64, int16x4), or its code's.
std::string DLPackTypeName(const DLDataType& t) {
  const char* kind = t.code == kDLInt       ? "int"
                     : t.code == kDLUInt    ? "uint"
                     : t.code == kDLFloat   ? "float"
                     : t.code == kDLBfloat  ? "bfloat"
                     : t.code == kDLComplex ? "complex"
                     : t.code == 6 /* kDLBool, newer than this header */
                         ? "bool"
                         : nullptr;
  if (kind == nullptr) return "unknown";
  std::string name = kind + std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

// Whether `obj` is a torch tensor with its negative bit set (a lazily
// negated view, such as `z.conj().imag`): torch's DLPack export drops the
// bit, so its memory holds the values with the other sign.
bool IsNegatedView(const py::object& obj) {
  try {
    return py::hasattr(obj, "is_neg") && obj.attr("is_neg")().cast<bool>();
  } catch (py::error_already_set&) {
    return false;
  } catch (const py::cast_error&) {
    return false;
  }
}

// For a save, a copy of the negated view `obj` that holds the values it
// shows (kept in `borrowed`); InvalidArgument for a load target.
py::object NegationResolved(const py::object& obj, const LeafPath& path,
                            bool writable, Borrowed& borrowed) {
  if (writable) {
    Invalid("tensor " + Where(path) +
            ": a load target with torch's negative bit set (a lazily "
            "negated view, such as z.conj().imag) cannot be filled in "
            "place: its memory holds the values with the other sign; load "
            "into a tensor without it (resolve_neg()) and copy");
  }
  py::object resolved = obj.attr("resolve_neg")();
  borrowed.keep.push_back(resolved);
  return resolved;
}

// A view of a DLPack tensor's memory; the capsule is kept in `borrowed`.
TensorView FromDLPackObject(const py::object& obj, const LeafPath& path,
                            bool writable, Borrowed& borrowed) {
  if (IsNegatedView(obj)) {
    return FromDLPackObject(NegationResolved(obj, path, writable, borrowed),
                            path, writable, borrowed);
  }
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_Exception) || e.matches(PyExc_MemoryError)) throw;
    if (IsHostTorchBool(obj)) {
      py::object view = obj.attr("numpy")();
      borrowed.keep.push_back(view);
      if (writable) borrowed.written_torch.push_back(obj);
      return FromArray(view.cast<py::array>(), path, writable, borrowed);
    }
    // torch refuses to export a tensor that requires grad (a parameter, as
    // `named_parameters()` or `state_dict(keep_vars=True)` give): its
    // detached view shares the memory, as torch's own save and load_state_dict
    // use it.
    if (RequiresGrad(obj)) {
      py::object detached = obj.attr("detach")();
      borrowed.keep.push_back(detached);
      return FromDLPackObject(detached, path, writable, borrowed);
    }
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
  if (writable && py::hasattr(obj, "_version"))
    borrowed.written_torch.push_back(obj);
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
    Invalid("tensor " + Where(path) + ": dtype " + DLPackTypeName(t.dtype) +
            " (DLPack code " + std::to_string(t.dtype.code) + ", " +
            std::to_string(t.dtype.bits) + " bits, " +
            std::to_string(t.dtype.lanes) +
            " lanes) is not supported (ckptdb stores bool, int8 to int64, "
            "uint8, uint32, uint64, float8, bfloat16 and float16 to "
            "float64)");
  }
  Shape shape(t.shape, t.shape + t.ndim);
  // DLPack strides count elements (none: C-contiguous).
  Shape strides;
  if (t.strides != nullptr)
    strides = ElementStridesOf(shape, t.strides, 1, path, writable);
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return TensorView::Whole(data, *dtype, std::move(shape), device)
      .WithStrides(std::move(strides));
}

// A view of any tensor leaf: numpy array, DLPack object, or Shard of one.
TensorView TensorLeaf(const py::object& obj, const LeafPath& path,
                      bool writable, Borrowed& borrowed);

void Reinterpret(const py::object& shard, const LeafPath& path,
                 TensorView& view);

TensorView FromShard(const py::object& shard, const LeafPath& path,
                     bool writable, Borrowed& borrowed) {
  TensorView view = TensorLeaf(shard.attr("data"), path, writable, borrowed);
  view.global_shape = ShapeOf(shard.attr("global_shape"), path, "global_shape");
  view.global_offset =
      ShapeOf(shard.attr("global_offset"), path, "global_offset");
  Reinterpret(shard, path, view);
  return view;
}

// A Shard's or FlatShard's `dtype`: the data's bits read as that dtype.
void Reinterpret(const py::object& shard, const LeafPath& path,
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
TensorView FromFlatShard(const py::object& shard, const LeafPath& path,
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

TensorView TensorLeaf(const py::object& obj, const LeafPath& path,
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
    return FromArray(obj.cast<py::array>(), path, writable, borrowed);
  if (!py::hasattr(obj, "__dlpack__")) {
    Invalid("tensor " + Where(path) +
            ": Shard data must be a numpy array or a DLPack tensor (an object "
            "with __dlpack__), got " +
            TypeName(obj));
  }
  return FromDLPackObject(obj, path, writable, borrowed);
}

std::optional<Value> SmallValue(const py::handle& obj, const LeafPath& path) {
  if (obj.is_none()) return Value(None{});
  if (py::isinstance<py::bool_>(obj)) return Value(obj.cast<bool>());
  if (py::isinstance<py::int_>(obj)) {
    try {
      return Value(obj.cast<int64_t>());
    } catch (const py::cast_error&) {
      // Beyond 64 bits: its decimal digits.
      return Value(BigInt{DecimalDigits(obj)});
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
    const py::object item = obj.attr("item")();
    // numpy.longdouble's item is itself (no Python type holds it).
    if (py::isinstance(item, classes().numpy_scalar)) {
      Invalid("value " + Where(path) + ": a numpy." +
              py::str(py::type::handle_of(obj).attr("__name__"))
                  .cast<std::string>() +
              " scalar has no Python value (convert it, e.g. with "
              "float())");
    }
    return SmallValue(item, path);
  }
  return std::nullopt;
}

// Whether `obj` is a tensor leaf. The built-in scalars (exactly those
// types, the values of a param group) are not, which is known without looking
// up __dlpack__: a failed attribute lookup raises and clears an exception,
// several times the cost of the rest of a value's save.
bool IsTensorLeaf(const py::handle& obj) {
  PyObject* o = obj.ptr();
  if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) ||
      PyFloat_CheckExact(o) || PyUnicode_CheckExact(o) ||
      PyBytes_CheckExact(o) || py::isinstance(obj, classes().numpy_scalar))
    return false;
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

// A new dict or list of the same type and items as `container`.
py::object ShallowCopy(const py::handle& container) {
  PyObject* o = container.ptr();
  PyObject* copy = PyDict_CheckExact(o) ? PyDict_Copy(o)
                   : PyList_CheckExact(o)
                       ? PyList_GetSlice(o, 0, PY_SSIZE_T_MAX)
                       : nullptr;
  if (copy != nullptr) return py::reinterpret_steal<py::object>(copy);
  if (PyErr_Occurred()) throw py::error_already_set();
  return py::module_::import("copy").attr("copy")(container);
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
    StateDict::Map::iterator last = out.items().end();
    if (PyDict_Check(obj.ptr())) {
      for (auto [key, item] : py::reinterpret_borrow<py::dict>(obj)) {
        Key k = Unwrap(DictKey(key, path));
        Item(obj, py::reinterpret_borrow<py::object>(key), std::move(k),
             py::reinterpret_borrow<py::object>(item), path, tuple, out, last);
      }
      return;
    }
    const py::sequence items = py::reinterpret_borrow<py::sequence>(obj);
    for (size_t i = 0; i < items.size(); ++i) {
      Item(obj, py::int_(i), Key(static_cast<int64_t>(i)), items[i], path,
           tuple, out, last);
    }
  }

 private:
  // The entry of `k` in `out`, made when absent; `last` is the entry made
  // before, and becomes this one. A dict's items often come in key order for
  // a run ("layer1.w" after "layer1.b", "layer11" after "layer10"): those go
  // in right after the one before, without a search of the tree.
  static StateDict::Entry& EntryOf(StateDict& out, Key k,
                                   StateDict::Map::iterator& last) {
    StateDict::Map& items = out.items();
    last = items.try_emplace(last == items.end() ? last : std::next(last),
                             std::move(k));
    return last->second;
  }

  // Converts item `key` (`k`) of `container` at `path` into `out`.
  void Item(const py::handle& container, const py::object& key, Key k,
            const py::object& value, const std::string& path, int tuple,
            StateDict& out, StateDict::Map::iterator& last) {
    const LeafPath leaf(path, k);
    if (std::optional<ContainerKind> kind = ContainerOf(value)) {
      const std::string here = leaf;
      CheckDescent(value, here, ancestors_);
      if (*kind != ContainerKind::kTuple && writable_ &&
          !met_.insert(value.ptr()).second) {
        // A dict or list met before at another path (a scheduler's state
        // dict shares its last learning rates with one of its schedulers'):
        // filled in place, it would take the values of every path in turn.
        // The load fills a copy here instead, which it puts in the
        // container's place, as the state loaded from a file would be.
        py::object copy = ShallowCopy(value);
        borrowed_.values.AddCopy(py::reinterpret_borrow<py::object>(container),
                                 key, tuple, copy);
        borrowed_.keep.push_back(copy);
        Item(container, key, std::move(k), copy, path, tuple, out, last);
        return;
      }
      int child_tuple = ValueSlots::kNoTuple;
      if (*kind == ContainerKind::kTuple) {
        child_tuple = borrowed_.values.AddTuple(
            py::reinterpret_borrow<py::object>(container), key, tuple, value);
      }
      StateDict::Entry& entry = EntryOf(out, std::move(k), last);
      if (!std::holds_alternative<StateDict>(entry.node))
        entry.node = StateDict(*kind);
      ancestors_.emplace_back(value.ptr(), here);
      Container(value, here, child_tuple, std::get<StateDict>(entry.node));
      ancestors_.pop_back();
    } else if (Py_TYPE(value.ptr()) ==
               py::detail::npy_api::get().PyArray_Type_) {
      // A plain numpy array, the common leaf.
      borrowed_.keep.push_back(value);
      TensorView view =
          FromArray(value.cast<py::array>(), leaf, writable_, borrowed_);
      EntryOf(out, std::move(k), last).node = std::move(view);
    } else if (IsTensorLeaf(value)) {
      TensorView view = TensorLeaf(value, leaf, writable_, borrowed_);
      EntryOf(out, std::move(k), last).node = std::move(view);
    } else if (std::optional<Value> v = SmallValue(value, leaf)) {
      StateDict::Entry& entry = EntryOf(out, std::move(k), last);
      entry.node = std::move(*v);
      borrowed_.values.AddValue(py::reinterpret_borrow<py::object>(container),
                                key, tuple, &std::get<Value>(entry.node));
    } else {
      Invalid(
          "leaf " + Where(leaf) + " has unsupported type " + TypeName(value) +
          " (arrays, DLPack tensors, Shard, FlatShard, int, float, bool, str, "
          "bytes, None, numpy scalars, or dict, list and tuple of them)");
    }
  }

  const bool writable_;
  Borrowed& borrowed_;
  Ancestors ancestors_;
  // The dicts and lists of a load's state dict met so far.
  std::unordered_set<PyObject*> met_;
};

}  // namespace

void MarkWritten(const std::vector<py::object>& tensors) {
  if (tensors.empty()) return;
  const py::object torch_c = py::module_::import("torch").attr("_C");
  const py::object increment =
      py::getattr(torch_c, "_increment_version", py::none());
  for (const py::object& t : tensors) {
    if (!increment.is_none()) {
      increment(t);
      continue;
    }
    // An in-place change of a temporary alias's layout (to the same one)
    // counts as a write of the tensor's memory, which the alias shares with
    // its version counter; no byte is touched. A named tensor's alias drops
    // its names (torch refuses as_strided_ on named tensors).
    py::object alias = t.attr("detach")();
    if (py::hasattr(alias, "has_names") &&
        alias.attr("has_names")().cast<bool>())
      alias = alias.attr("rename")(py::none());
    alias.attr("as_strided_")(t.attr("size")(), t.attr("stride")());
  }
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
    case DType::kUInt32:
      return py::dtype("uint32");
    case DType::kUInt64:
      return py::dtype("uint64");
    case DType::kBool:
      return py::dtype("bool");
  }
  return py::dtype("uint8");
}

void Convert(const py::dict& dict, bool writable, StateDict& out,
             Borrowed& borrowed) {
  Converter(writable, borrowed, dict)
      .Container(dict, "", ValueSlots::kNoTuple, out);
}

py::list ShapeList(const Shape& s) {
  py::list out(s.size());
  for (size_t d = 0; d < s.size(); ++d) out[d] = py::int_(s[d]);
  return out;
}

}  // namespace ckptdb::python
