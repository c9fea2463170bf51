#include "bindings/python/arguments.h"

#include <climits>
#include <cstdint>
#include <cstring>

namespace py = pybind11;

namespace ckptdb::python {
namespace {

// numpy's bool scalar: its type is named numpy.bool_ before numpy 2 and
// numpy.bool from numpy 2 on.
bool IsNumpyBool(py::handle obj) {
  const char* name = Py_TYPE(obj.ptr())->tp_name;
  return std::strcmp(name, "numpy.bool_") == 0 ||
         std::strcmp(name, "numpy.bool") == 0;
}

Status WrongType(const std::string& what, const char* wanted, py::handle obj) {
  return Status::InvalidArgument(what + " must be " + wanted + ", got " +
                                 TypeName(obj) + " " + Repr(obj));
}

// An Int in [min, max]; `wanted` describes the range for messages.
Result<int64_t> IntIn(py::handle obj, const std::string& what, int64_t min,
                      int64_t max, const char* wanted) {
  CKPTDB_ASSIGN_OR_RETURN(int64_t v, Int(obj, what));
  if (v < min || v > max) return WrongType(what, wanted, obj);
  return v;
}

// `show`(obj) (repr or str) as UTF-8, lone surrogates escaped, at most 200
// bytes; a placeholder when `show` fails.
std::string Shown(py::handle obj, PyObject* (*show)(PyObject*)) {
  PyObject* text = show(obj.ptr());
  PyObject* utf8 = text != nullptr ? PyUnicode_AsEncodedString(
                                         text, "utf-8", "backslashreplace")
                                   : nullptr;
  std::string out = utf8 != nullptr ? PyBytes_AsString(utf8)
                                    : "<" + TypeName(obj) + " object>";
  Py_XDECREF(utf8);
  Py_XDECREF(text);
  PyErr_Clear();
  size_t keep = 197;
  if (out.size() <= keep + 3) return out;
  while (keep > 0 && (out[keep] & 0xC0) == 0x80) --keep;  // a whole character
  return out.substr(0, keep) + "...";
}

}  // namespace

std::string TypeName(py::handle obj) { return Py_TYPE(obj.ptr())->tp_name; }

std::string Repr(py::handle obj) { return Shown(obj, PyObject_Repr); }

std::string Str(py::handle obj) { return Shown(obj, PyObject_Str); }

Result<std::string> Text(py::handle obj, const std::string& what) {
  if (!PyUnicode_Check(obj.ptr())) return WrongType(what, "a str", obj);
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    return Status::InvalidArgument(
        what + " is not valid text: " + Repr(obj) +
        " holds a lone surrogate, which UTF-8 cannot encode");
  }
  return std::string(data, static_cast<size_t>(size));
}

py::str StoredText(const std::string& text) {
  PyObject* decoded = PyUnicode_DecodeUTF8(
      text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (decoded == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

Result<std::optional<std::string>> OptionalText(py::handle obj,
                                                const std::string& what) {
  if (obj.is_none()) return std::optional<std::string>();
  CKPTDB_ASSIGN_OR_RETURN(std::string text, Text(obj, what));
  return std::optional<std::string>(std::move(text));
}

namespace {

// An int (a Python int or anything with __index__, not a bool) as a 64-bit
// value; `*overflow` is +1 or -1 (and the value its sign's bound) for one
// beyond 64 bits, else 0. nullopt for anything else.
std::optional<int64_t> IndexValue(py::handle obj, int* overflow) {
  *overflow = 0;
  if (PyBool_Check(obj.ptr()) || IsNumpyBool(obj) || !PyIndex_Check(obj.ptr()))
    return std::nullopt;
  PyObject* index = PyNumber_Index(obj.ptr());
  const long long v =
      index != nullptr ? PyLong_AsLongLongAndOverflow(index, overflow) : -1;
  Py_XDECREF(index);
  if (index == nullptr || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return std::nullopt;
  }
  if (*overflow != 0) return *overflow > 0 ? INT64_MAX : INT64_MIN;
  return static_cast<int64_t>(v);
}

}  // namespace

Result<int64_t> Int(py::handle obj, const std::string& what) {
  int overflow = 0;
  const std::optional<int64_t> v = IndexValue(obj, &overflow);
  if (!v) return WrongType(what, "an int", obj);
  if (overflow != 0)
    return WrongType(what, "a signed 64-bit int (-2**63 to 2**63 - 1)", obj);
  return *v;
}

Result<std::optional<int64_t>> OptionalInt(py::handle obj,
                                           const std::string& what) {
  if (obj.is_none()) return std::optional<int64_t>();
  CKPTDB_ASSIGN_OR_RETURN(int64_t v, Int(obj, what));
  return std::optional<int64_t>(v);
}

Result<bool> Flag(py::handle obj, const std::string& what) {
  if (!PyBool_Check(obj.ptr()) && !IsNumpyBool(obj))
    return WrongType(what, "True or False", obj);
  return PyObject_IsTrue(obj.ptr()) == 1;
}

Result<std::map<std::string, std::string>> TextMap(py::handle obj,
                                                   const std::string& what) {
  const std::string wanted = what + " must be a dict of str to str";
  if (!PyDict_Check(obj.ptr())) {
    return Status::InvalidArgument(wanted + ", got " + TypeName(obj));
  }
  std::map<std::string, std::string> out;
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(obj)) {
    if (!PyUnicode_Check(key.ptr())) {
      return Status::InvalidArgument(wanted + ": key " + Repr(key) + " is " +
                                     TypeName(key));
    }
    CKPTDB_ASSIGN_OR_RETURN(std::string k, Text(key, what + " key"));
    const std::string entry = what + "[" + Repr(key) + "]";
    if (!PyUnicode_Check(value.ptr())) {
      return Status::InvalidArgument(wanted + ": " + entry + " is " +
                                     TypeName(value));
    }
    CKPTDB_ASSIGN_OR_RETURN(out[std::move(k)], Text(value, entry));
  }
  return out;
}

Result<CheckpointSelector> Selector(py::handle step, py::handle tag,
                                    py::handle id) {
  CKPTDB_ASSIGN_OR_RETURN(std::optional<int64_t> s, OptionalInt(step, "step"));
  CKPTDB_ASSIGN_OR_RETURN(std::optional<std::string> t,
                          OptionalText(tag, "tag"));
  CKPTDB_ASSIGN_OR_RETURN(std::optional<int64_t> i, OptionalInt(id, "id"));
  if (s.has_value() + t.has_value() + i.has_value() > 1)
    return Status::InvalidArgument("pass at most one of step, tag and id");
  if (s) return CheckpointSelector::Step(*s);
  if (t) return CheckpointSelector::Tag(std::move(*t));
  if (i) return CheckpointSelector::Id(*i);
  return CheckpointSelector::Latest();
}

Result<std::string> FlatKey(py::handle key) {
  if (PyUnicode_Check(key.ptr())) return Text(key, "key");
  if (!PyTuple_Check(key.ptr()) && !PyList_Check(key.ptr())) {
    return WrongType("key", "a flat key (str) or a path (tuple of str and int)",
                     key);
  }
  std::vector<Key> path;
  for (py::handle part : key) {
    const std::string what =
        "key part " + std::to_string(path.size()) + " of " + Repr(key);
    if (PyUnicode_Check(part.ptr())) {
      CKPTDB_ASSIGN_OR_RETURN(std::string text, Text(part, what));
      path.emplace_back(std::move(text));
    } else {
      Result<int64_t> index = Int(part, what);
      if (!index.ok()) return WrongType(what, "a str or an int", part);
      path.emplace_back(*index);
    }
  }
  return JoinKeys(path);
}

Result<Options> OpenOptions(py::handle create, py::handle read_only,
                            const py::dict& options) {
  Options o;
  CKPTDB_ASSIGN_OR_RETURN(o.create_if_missing, Flag(create, "create"));
  CKPTDB_ASSIGN_OR_RETURN(o.read_only, Flag(read_only, "read_only"));
  const char* kSize = "an int >= 0";
  for (auto [key, value] : options) {
    CKPTDB_ASSIGN_OR_RETURN(std::string name, Text(key, "option name"));
    const std::string what = "option '" + name + "'";
    if (name == "max_chunk_bytes") {
      CKPTDB_ASSIGN_OR_RETURN(int64_t v,
                              IntIn(value, what, 0, INT64_MAX, kSize));
      o.max_chunk_bytes = static_cast<size_t>(v);
    } else if (name == "io_threads") {
      const std::string range = "an int from 0 (the hardware threads) to " +
                                std::to_string(kMaxIoThreads);
      CKPTDB_ASSIGN_OR_RETURN(
          int64_t v, IntIn(value, what, 0, kMaxIoThreads, range.c_str()));
      o.io_threads = static_cast<int>(v);
    } else if (name == "load_buffer_bytes") {
      CKPTDB_ASSIGN_OR_RETURN(int64_t v,
                              IntIn(value, what, 0, INT64_MAX, kSize));
      o.load_buffer_bytes = static_cast<size_t>(v);
    } else if (name == "snapshot_bytes") {
      CKPTDB_ASSIGN_OR_RETURN(int64_t v,
                              IntIn(value, what, 0, INT64_MAX, kSize));
      o.snapshot_bytes = static_cast<size_t>(v);
    } else if (name == "sync") {
      CKPTDB_ASSIGN_OR_RETURN(o.sync, Flag(value, what));
    } else if (name == "keep_last" || name == "keep_every_steps") {
      std::optional<int64_t>& field =
          name == "keep_last" ? o.keep_last : o.keep_every_steps;
      field.reset();
      if (!value.is_none()) {
        CKPTDB_ASSIGN_OR_RETURN(
            field, IntIn(value, what, 1, INT64_MAX, "an int >= 1 or None"));
      }
    } else if (name == "incremental") {
      CKPTDB_ASSIGN_OR_RETURN(o.incremental, Flag(value, what));
    } else if (name == "incremental_depth") {
      CKPTDB_ASSIGN_OR_RETURN(int64_t v,
                              IntIn(value, what, 1, INT_MAX, "an int >= 1"));
      o.incremental_depth = static_cast<int>(v);
    } else {
      return Status::InvalidArgument(
          "unknown option '" + name +
          "' (max_chunk_bytes, io_threads, sync, load_buffer_bytes, "
          "snapshot_bytes, keep_last, keep_every_steps, incremental, "
          "incremental_depth)");
    }
  }
  return o;
}

namespace {

// A slice's bound: an int, or None; one beyond 64 bits is taken as the
// nearest 64-bit one (the bound is clamped to the dimension, as numpy does).
Result<std::optional<int64_t>> SliceBound(py::handle obj,
                                          const std::string& what) {
  if (obj.is_none()) return std::optional<int64_t>();
  int overflow = 0;
  const std::optional<int64_t> v = IndexValue(obj, &overflow);
  if (!v) return WrongType(what, "an int", obj);
  return v;
}

// One entry of a DB.read index: an int or a slice.
Result<IndexEntry> IndexEntryOf(py::handle entry, const std::string& what) {
  if (PySlice_Check(entry.ptr())) {
    CKPTDB_ASSIGN_OR_RETURN(std::optional<int64_t> start,
                            SliceBound(entry.attr("start"), what + " start"));
    CKPTDB_ASSIGN_OR_RETURN(std::optional<int64_t> stop,
                            SliceBound(entry.attr("stop"), what + " stop"));
    CKPTDB_ASSIGN_OR_RETURN(std::optional<int64_t> step,
                            OptionalInt(entry.attr("step"), what + " step"));
    return IndexEntry::Range(start, stop, step.value_or(1));
  }
  if (PyBool_Check(entry.ptr()) || IsNumpyBool(entry) ||
      !PyIndex_Check(entry.ptr())) {
    return WrongType(what, "an int or a slice", entry);
  }
  CKPTDB_ASSIGN_OR_RETURN(int64_t at, Int(entry, what));
  return IndexEntry::At(at);
}

}  // namespace

Result<TensorIndex> IndexOf(py::handle index, const std::string& key) {
  TensorIndex out;
  if (index.is_none()) return out;
  const std::string what = "index " + Repr(index) + " of tensor '" + key + "'";
  if (!PyTuple_Check(index.ptr())) {
    CKPTDB_ASSIGN_OR_RETURN(IndexEntry entry, IndexEntryOf(index, what));
    out.push_back(entry);
    return out;
  }
  for (py::handle entry : index) {
    CKPTDB_ASSIGN_OR_RETURN(
        IndexEntry e,
        IndexEntryOf(entry,
                     what + ", entry " + std::to_string(out.size()) + ","));
    out.push_back(e);
  }
  return out;
}

}  // namespace ckptdb::python
