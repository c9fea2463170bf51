#include "bindings/python/errors.h"

namespace ckptdb::python {

namespace py = pybind11;

Classes& classes() {
  // Never destroyed: outlives the interpreter's teardown.
  static auto* c = new Classes();
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

[[noreturn]] void Invalid(const std::string& message) {
  Raise(Status::InvalidArgument(message));
}

std::string Where(const std::string& path) {
  if (path.empty()) return "the state dict";
  constexpr size_t kHead = 96, kTail = 64;
  if (path.size() <= kHead + kTail + 32) return "'" + path + "'";
  return "'" + path.substr(0, kHead) + "...(" +
         std::to_string(path.size() - kHead - kTail) + " more characters)..." +
         path.substr(path.size() - kTail) + "'";
}

}  // namespace ckptdb::python
