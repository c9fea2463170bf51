#pragma once

// Python state dicts as StateDicts of borrowed views (zero copy): numpy
// arrays, DLPack tensors, Shards and FlatShards of them as tensor leaves;
// dicts, lists and tuples as containers; None, bools, ints, floats, str,
// bytes and numpy scalars as small values. Bad input raises the package's
// InvalidArgumentError naming the path. REQUIRES: the GIL.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "bindings/python/containers.h"
#include "ckptdb/db.h"

namespace ckptdb::python {

// What a conversion borrows: Python objects kept alive while views point into
// them, and where each small value of the state sits (for load's write-back).
struct Borrowed {
  std::vector<pybind11::object> keep;
  ValueSlots values;
  // The torch tensors a load writes in place (MarkWritten).
  std::vector<pybind11::object> written_torch;
};

// Counts a write in each of `tensors`' version (torch's record of in-place
// changes, which autograd checks before it uses a tensor it saved), as
// torch's own in-place copy does: ckptdb writes their memory directly.
void MarkWritten(const std::vector<pybind11::object>& tensors);

// Converts the state dict `dict` into `out`; `writable`: for a load, whose
// targets must be writable.
void Convert(const pybind11::dict& dict, bool writable, StateDict& out,
             Borrowed& borrowed);

// The numpy dtype a tensor of `dtype` crosses numpy as: bfloat16 and the
// float8 types as uint16 / uint8 raw bits (numpy has none of them).
pybind11::dtype ToNumpy(DType dtype);

// A shape as a Python list of ints.
pybind11::list ShapeList(const Shape& s);

}  // namespace ckptdb::python
