#pragma once

#include <map>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb::planner {

// A path from a state dict's root to a leaf: each part's text (a str key, or
// an int key or index in decimal). Its PathKinds say how each part addresses
// its container.
using Path = std::vector<std::string>;

// "a.b.c": the flat key of a path.
std::string JoinPath(const Path& path);

// "['optim', 'state', 0]": a path for messages, int parts unquoted. `kinds`
// may be empty (every part a str key).
std::string QuotePath(const Path& path, const PathKinds& kinds);

// The container a part of `kind` addresses (a dict takes str and int keys),
// and its name: "dict", "list" or "tuple".
ContainerKind ContainerOf(PathPartKind kind);
const char* ContainerName(ContainerKind kind);

// True when every part is a dict's str key (the only kind older stores have).
bool AllStrKeys(const PathKinds& kinds);

// One leaf of a flattened state dict. Pointers borrow from the flattened dict.
template <typename TensorPtr, typename ValuePtr>
struct BasicFlatLeaf {
  std::string flat_key;
  Path path;
  // Parallel to path.
  PathKinds kinds;
  // Exactly one of tensor / value is set.
  TensorPtr tensor = nullptr;
  ValuePtr value = nullptr;
};

using FlatLeaf = BasicFlatLeaf<const TensorView*, const Value*>;
using MutableFlatLeaf = BasicFlatLeaf<TensorView*, Value*>;

// The leaves of `state` sorted by flat key. InvalidArgument when two paths join
// to the same flat key (naming both, as with a dict's keys 0 and "0"), when a
// list or tuple has other keys than 0..n-1, or when it nests deeper than
// kMaxNesting. Empty containers have no leaves.
Result<std::vector<FlatLeaf>> Flatten(const StateDict& state);
// The same leaves as Flatten's, without their path and kinds (a load matches
// leaves by flat key); the same errors.
Result<std::vector<MutableFlatLeaf>> FlattenMutable(StateDict& state);

// Rebuilds the nesting of flat values from a flat mapping (flat key -> path)
// and the kinds of its parts (flat key -> kinds; a key absent there has only
// str dict keys): int keys come back as ints, lists and tuples as such (a
// list lacks the indexes of its tensors).
// InvalidArgument when a key has no mapping or two paths conflict (a leaf where
// a container is needed, or one container seen as two kinds).
Result<StateDict> Unflatten(
    const std::map<std::string, Value>& values,
    const std::map<std::string, Path>& flat_mapping,
    const std::map<std::string, PathKinds>& path_kinds = {});

}  // namespace ckptdb::planner
