#include "bindings/python/containers.h"

#include "bindings/python/arguments.h"
#include "bindings/python/errors.h"

namespace py = pybind11;

namespace ckptdb::python {

#if PY_VERSION_HEX >= 0x030A0000
GcPaused::GcPaused() : was_enabled_(PyGC_Disable() != 0) {}
GcPaused::~GcPaused() {
  if (was_enabled_) PyGC_Enable();
}
#else
GcPaused::GcPaused() {
  py::module_ gc = py::module_::import("gc");
  was_enabled_ = gc.attr("isenabled")().cast<bool>();
  gc.attr("disable")();
}
GcPaused::~GcPaused() {
  if (was_enabled_) py::module_::import("gc").attr("enable")();
}
#endif

namespace {

// Runs `convert` with Python's limit on int <-> str digits lifted (where the
// interpreter has one), and the limit as it was afterwards. The GIL is held
// throughout, so no other Python code sees it lifted.
template <typename F>
auto WithoutDigitLimit(F convert) {
  const py::module_ sys = py::module_::import("sys");
  if (!py::hasattr(sys, "set_int_max_str_digits")) return convert();
  const py::object limit = sys.attr("get_int_max_str_digits")();
  sys.attr("set_int_max_str_digits")(0);
  struct Restore {
    const py::module_& sys;
    const py::object& limit;
    ~Restore() {
      PyObject *type, *value, *trace;
      PyErr_Fetch(&type, &value, &trace);  // an error of `convert` stands
      try {
        sys.attr("set_int_max_str_digits")(limit);
      } catch (const py::error_already_set&) {
        PyErr_Clear();  // the limit as it was is a valid one: never here
      }
      PyErr_Restore(type, value, trace);
    }
  } restore{sys, limit};
  return convert();
}

}  // namespace

std::string DecimalDigits(const py::handle& integer) {
  return WithoutDigitLimit(
      [&] { return py::str(integer).cast<std::string>(); });
}

py::object IntOfDigits(const std::string& digits) {
  return WithoutDigitLimit([&] {
    PyObject* out = PyLong_FromString(digits.c_str(), nullptr, 10);
    if (out == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(out);
  });
}

py::object ToPython(const Value& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Bytes>) {
          return py::bytes(x.data);
        } else if constexpr (std::is_same_v<T, None>) {
          return py::none();
        } else if constexpr (std::is_same_v<T, BigInt>) {
          return IntOfDigits(x.digits);
        } else {
          return py::cast(x);
        }
      },
      v);
}

Result<Key> DictKey(py::handle key, const std::string& path) {
  if (PyUnicode_Check(key.ptr())) {
    // The common case, before any error text is built.
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(key.ptr(), &size);
    if (data != nullptr)
      return Key(std::string(data, static_cast<size_t>(size)));
    PyErr_Clear();
  }
  const std::string where = Where(path);
  if (PyUnicode_Check(key.ptr())) {
    CKPTDB_ASSIGN_OR_RETURN(std::string text, Text(key, "a key of " + where));
    return Key(std::move(text));
  }
  Result<int64_t> i = Int(key, "a key of " + where);
  if (i.ok()) return Key(*i);
  // An int out of range says so; anything else is the wrong type.
  if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) return i.status();
  return Status::InvalidArgument("state dict keys must be str or int, got " +
                                 TypeName(key) + " (" + Repr(key) + ") in " +
                                 where);
}

py::list PathParts(const std::vector<std::string>& path,
                   const PathKinds* kinds) {
  CKPTDB_ASSERT(kinds == nullptr || kinds->size() == path.size());
  py::list out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (kinds != nullptr && (*kinds)[i] != PathPartKind::kStrKey) {
      // The store checked that int parts are decimal ints.
      out.append(py::int_(std::stoll(path[i])));
    } else {
      out.append(py::str(path[i]));
    }
  }
  return out;
}

int ValueSlots::AddTuple(py::object parent, py::object key, int parent_tuple,
                         py::object tuple) {
  CKPTDB_ASSERT(parent_tuple < static_cast<int>(tuples_.size()));
  tuples_.push_back(
      {std::move(parent), std::move(key), parent_tuple, std::move(tuple)});
  return static_cast<int>(tuples_.size()) - 1;
}

void ValueSlots::AddValue(py::object container, py::object key, int tuple,
                          const Value* value) {
  values_.push_back(
      {std::move(container), std::move(key), tuple, value, *value});
}

void ValueSlots::AddCopy(py::object container, py::object key, int tuple,
                         py::object copy) {
  copies_.push_back(
      {std::move(container), std::move(key), tuple, std::move(copy)});
}

namespace {

// A new tuple of `items` of `old`'s type: a tuple, or an instance of its
// subclass: a namedtuple (the states of JAX's optax are) through its _make,
// another subclass through its constructor from an iterable, a plain tuple
// when that constructor refuses.
py::object TupleLike(const py::object& old, const py::object& items) {
  if (PyTuple_CheckExact(old.ptr())) return py::tuple(items);
  const py::handle type = py::type::handle_of(old);
  try {
    if (py::hasattr(type, "_make")) return type.attr("_make")(items);
    return type(items);
  } catch (py::error_already_set&) {
    return py::tuple(items);
  }
}

}  // namespace

void ValueSlots::WriteBack() const {
  // The new items of each recorded tuple that changed (empty: unchanged).
  std::vector<py::object> items(tuples_.size());
  auto set = [&](const py::object& container, const py::object& key, int tuple,
                 py::object value) {
    if (tuple == kNoTuple) {
      container[key] = std::move(value);
      return;
    }
    if (!items[tuple]) items[tuple] = py::list(tuples_[tuple].tuple);
    items[tuple][key] = std::move(value);
  };
  for (const CopySlot& slot : copies_)
    set(slot.container, slot.key, slot.tuple, slot.copy);
  for (const Slot& slot : values_) {
    if (*slot.value != slot.before)
      set(slot.container, slot.key, slot.tuple, ToPython(*slot.value));
  }
  // Children before their parents: a tuple is recorded after its parent.
  for (size_t t = tuples_.size(); t-- > 0;) {
    if (!items[t]) continue;
    const TupleSlot& slot = tuples_[t];
    set(slot.parent, slot.key, slot.parent_tuple,
        TupleLike(slot.tuple, items[t]));
  }
}

}  // namespace ckptdb::python
