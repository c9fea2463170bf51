#pragma once

// The package's Python classes as the C++ side sees them, and Statuses raised
// as the package's exceptions. REQUIRES: the GIL.

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "ckptdb/status.h"

namespace ckptdb::python {

// The package's Python classes, registered by ckptdb/__init__.py at import.
struct Classes {
  pybind11::object error, not_found, invalid_argument, corruption, shard;
  // numpy.generic
  pybind11::object numpy_scalar;
  pybind11::object flat_shard{};
};
Classes& classes();

// Raises `s` as the package's exception for its code: NotFoundError,
// InvalidArgumentError (also for AlreadyExists), CorruptionError, else Error.
// REQUIRES: !s.ok().
[[noreturn]] void Raise(const Status& s);

inline void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

// Raises InvalidArgumentError with `message`.
[[noreturn]] void Invalid(const std::string& message);

// A path as messages show it: quoted, its middle elided when it is long (a
// path of a thousand levels).
std::string Where(const std::string& path);

}  // namespace ckptdb::python
