#pragma once

// Python call arguments as checked C++ values. A wrong type, an int out of
// range or text UTF-8 cannot encode is InvalidArgument naming the argument;
// nothing here raises a Python exception (the module turns the Status into
// one). REQUIRES: the GIL.

#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ckptdb/box.h"
#include "ckptdb/metadata.h"
#include "ckptdb/options.h"
#include "ckptdb/status.h"

namespace ckptdb::python {

// The name of `obj`'s type for messages: "list", "numpy.float64".
std::string TypeName(pybind11::handle obj);

// repr(obj) and str(obj) for messages, shortened; never fail.
std::string Repr(pybind11::handle obj);
std::string Str(pybind11::handle obj);

// A str as UTF-8. `what` names the argument ("tag", "a key of 'a.b'").
Result<std::string> Text(pybind11::handle obj, const std::string& what);
// Text read from a store as a str; bytes that are not UTF-8 (which a store
// written before saves checked its text may hold) as \xNN escapes, so that a
// listing never fails on one checkpoint's tag.
pybind11::str StoredText(const std::string& text);
// None or a str.
Result<std::optional<std::string>> OptionalText(pybind11::handle obj,
                                                const std::string& what);

// An int that fits in int64_t: a Python int or an object with __index__
// (numpy integers), not a bool.
Result<int64_t> Int(pybind11::handle obj, const std::string& what);
// None or an Int.
Result<std::optional<int64_t>> OptionalInt(pybind11::handle obj,
                                           const std::string& what);

// True or False (a Python or numpy bool).
Result<bool> Flag(pybind11::handle obj, const std::string& what);

// A dict of str to str (a save's user metadata).
Result<std::map<std::string, std::string>> TextMap(pybind11::handle obj,
                                                   const std::string& what);

// The checkpoint that `step`, `tag` or `id` (each None or a value, at most one
// given) selects; Latest when none is given.
Result<CheckpointSelector> Selector(pybind11::handle step, pybind11::handle tag,
                                    pybind11::handle id);

// A tensor key for DB.read: a flat key (str) or a path (tuple or list of str
// and int parts, as in the flat mapping).
Result<std::string> FlatKey(pybind11::handle key);

// The part of tensor `key` that DB.read's `index` selects: None (the whole
// tensor), an int or a slice, or a tuple of ints and slices (numpy's basic
// indexing without Ellipsis or newaxis). Bounds and steps are checked against
// the tensor by DB::Read; here only the types, naming the key and the index.
Result<TensorIndex> IndexOf(pybind11::handle index, const std::string& key);

// The Options of ckptdb.open(path, create=, read_only=, **options).
Result<Options> OpenOptions(pybind11::handle create, pybind11::handle read_only,
                            const pybind11::dict& options);

}  // namespace ckptdb::python
