#pragma once

// The containers of a Python state dict (dict, list, tuple) as seen by the
// C++ side: their keys as StateDict keys, where their small values sit so that
// a load writes them back, and flat-mapping paths with their int parts as
// Python ints. REQUIRES: the GIL.

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb::python {

// Python's cyclic garbage collector paused for the object's life (restored
// as it was), while the binding builds many containers that cannot form a
// cycle: with it running, building DB.metadata() of 10,000 tensors (some
// 50,000 dicts and lists) ran its collections over every live object dozens
// of times, more than half of the call.
class GcPaused {
 public:
  GcPaused();
  ~GcPaused();
  GcPaused(const GcPaused&) = delete;
  GcPaused& operator=(const GcPaused&) = delete;

 private:
  bool was_enabled_ = false;
};

// An int beyond 64 bits and its decimal digits, both ways, past the limit
// Python 3.11 puts on int <-> str conversions (4,300 digits), which would
// make an int a save took unreadable in a process with the default limit.
std::string DecimalDigits(const pybind11::handle& integer);
pybind11::object IntOfDigits(const std::string& digits);

// The Python object of a small value (None for None, bytes for Bytes).
pybind11::object ToPython(const Value& value);

// A dict key as a StateDict key: a str, or an int (a Python int or numpy
// integer, not a bool). InvalidArgument naming the dict (at `path`) for any
// other key.
Result<Key> DictKey(pybind11::handle key, const std::string& path);

// A flat-mapping path as Python path parts: str parts, and ints for int keys
// and list and tuple indexes. `kinds` nullptr: every part a str.
pybind11::list PathParts(const std::vector<std::string>& path,
                         const PathKinds* kinds);

// Where the small values of a converted state dict sit. After a load,
// WriteBack puts each loaded value that differs from the converted one into its
// container: dicts and lists in place; a tuple (immutable) is replaced in its
// parent by a new tuple of its items and its type (a namedtuple stays one),
// which replaces its own parent when that is a tuple, and so on up.
class ValueSlots {
 public:
  // No tuple: a container that is not inside a recorded tuple's items.
  static constexpr int kNoTuple = -1;

  // Records the tuple that is item `key` of `parent` (`parent_tuple` when
  // `parent` is itself a recorded tuple) and returns its id. Tuples are
  // recorded parents first.
  int AddTuple(pybind11::object parent, pybind11::object key, int parent_tuple,
               pybind11::object tuple);
  // Records the small value at item `key` of `container` (a dict, list, or
  // the recorded tuple `tuple`); `value` is where the load leaves it.
  void AddValue(pybind11::object container, pybind11::object key, int tuple,
                const Value* value);
  // Records that item `key` of `container` (or of the recorded tuple `tuple`)
  // is to become `copy`, a copy of the container there, which the load fills
  // in its stead.
  void AddCopy(pybind11::object container, pybind11::object key, int tuple,
               pybind11::object copy);
  // Puts each recorded copy in its place, then writes back every value a load
  // changed.
  void WriteBack() const;

 private:
  struct Slot {
    pybind11::object container;
    pybind11::object key;
    int tuple;
    const Value* value;
    // As converted: a value the load did not change stays untouched.
    Value before;
  };
  struct TupleSlot {
    pybind11::object parent;
    pybind11::object key;
    int parent_tuple;
    pybind11::object tuple;
  };
  struct CopySlot {
    pybind11::object container;
    pybind11::object key;
    int tuple;
    pybind11::object copy;
  };
  std::vector<Slot> values_;
  std::vector<TupleSlot> tuples_;
  std::vector<CopySlot> copies_;
};

}  // namespace ckptdb::python
