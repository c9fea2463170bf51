#pragma once

#include <map>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb::planner {

using Path = std::vector<std::string>;

// "a.b.c": the flat key of a path.
std::string JoinPath(const Path& path);

// One leaf of a flattened state dict. Pointers borrow from the flattened dict.
template <typename TensorPtr, typename ValuePtr>
struct BasicFlatLeaf {
  std::string flat_key;
  Path path;
  TensorPtr tensor = nullptr;  // exactly one of tensor / value is set
  ValuePtr value = nullptr;
};

using FlatLeaf = BasicFlatLeaf<const TensorView*, const Value*>;
using MutableFlatLeaf = BasicFlatLeaf<TensorView*, Value*>;

// The leaves of `state` sorted by flat key. InvalidArgument when two paths join
// to the same flat key (naming both). Empty nested dicts have no leaves.
Result<std::vector<FlatLeaf>> Flatten(const StateDict& state);
Result<std::vector<MutableFlatLeaf>> FlattenMutable(StateDict& state);

// Rebuilds the nesting of flat values from a flat mapping (flat key -> path).
// InvalidArgument when a key has no mapping or two paths conflict (a leaf where
// a dict is needed).
Result<StateDict> Unflatten(const std::map<std::string, Value>& values,
                            const std::map<std::string, Path>& flat_mapping);

}  // namespace ckptdb::planner
