#include "planner/flatten.h"

#include <algorithm>
#include <charconv>

namespace ckptdb::planner {
namespace {

PathPartKind KindOf(ContainerKind container, const Key& key) {
  switch (container) {
    case ContainerKind::kList:
      return PathPartKind::kListIndex;
    case ContainerKind::kTuple:
      return PathPartKind::kTupleIndex;
    case ContainerKind::kDict:
      break;
  }
  return std::holds_alternative<int64_t>(key) ? PathPartKind::kIntKey
                                              : PathPartKind::kStrKey;
}

// OK when a list's or tuple's keys are its indexes 0..n-1 (Map order).
Status CheckSequence(const StateDict& dict, const Path& path,
                     const PathKinds& kinds) {
  if (dict.kind() == ContainerKind::kDict) return Status::OK();
  int64_t expected = 0;
  for (const auto& [key, entry] : dict.items()) {
    const auto* index = std::get_if<int64_t>(&key);
    if (index == nullptr || *index != expected++) {
      return Status::InvalidArgument(
          std::string("the ") + ContainerName(dict.kind()) + " at " +
          (path.empty() ? "the root" : QuotePath(path, kinds)) +
          " has item key " + (index ? "" : "'") + KeyText(key) +
          (index ? "" : "'") + "; its keys must be 0.." +
          std::to_string(dict.size() - 1));
    }
  }
  return Status::OK();
}

// Appends KeyText(key) to `out` (a str key without a copy of its own).
void AppendKeyText(std::string& out, const Key& key) {
  if (const auto* text = std::get_if<std::string>(&key)) {
    out += *text;
  } else {
    out += KeyText(key);
  }
}

// The leaves under `dict`, whose own path is `path` and flat key `flat`,
// `depth` containers deep. Without kPaths the leaves get no path and kinds,
// and `path` and `kinds` stay empty, so that errors name the root: the
// caller flattens again with paths for the message.
template <bool kPaths, typename Dict, typename Leaf>
Status Collect(Dict& dict, Path& path, PathKinds& kinds, std::string& flat,
               size_t depth, std::vector<Leaf>& out) {
  if (depth > kMaxNesting) {
    return Status::InvalidArgument("the state dict nests deeper than " +
                                   std::to_string(kMaxNesting) +
                                   " levels at '" + JoinPath(path) + "'");
  }
  // A nested state dict its builder could not build fails the call as the
  // root's would.
  CKPTDB_RETURN_IF_ERROR(dict.error());
  CKPTDB_RETURN_IF_ERROR(CheckSequence(dict, path, kinds));
  for (auto& [key, entry] : dict.items()) {
    const size_t parent = flat.size();
    if (depth > 1) flat += '.';
    if constexpr (kPaths) {
      path.push_back(KeyText(key));
      kinds.push_back(KindOf(dict.kind(), key));
      flat += path.back();
    } else {
      AppendKeyText(flat, key);
    }
    auto& node = entry.node;
    if (auto* child = std::get_if<StateDict>(&node)) {
      CKPTDB_RETURN_IF_ERROR(
          (Collect<kPaths>(*child, path, kinds, flat, depth + 1, out)));
    } else {
      Leaf& leaf = out.emplace_back();
      leaf.flat_key = flat;
      if constexpr (kPaths) {
        leaf.path = path;
        leaf.kinds = kinds;
      }
      if (auto* tensor = std::get_if<TensorView>(&node)) leaf.tensor = tensor;
      if (auto* value = std::get_if<Value>(&node)) leaf.value = value;
    }
    flat.resize(parent);
    if constexpr (kPaths) {
      path.pop_back();
      kinds.pop_back();
    }
  }
  return Status::OK();
}

template <bool kPaths, typename Dict, typename Leaf>
Result<std::vector<Leaf>> FlattenImpl(Dict& state) {
  std::vector<Leaf> leaves;
  Path path;
  PathKinds kinds;
  std::string flat;
  Status collected = Collect<kPaths>(state, path, kinds, flat, 1, leaves);
  // Usually in order already: a dict's keys come sorted.
  const auto by_key = [](const Leaf& a, const Leaf& b) {
    return a.flat_key < b.flat_key;
  };
  if (collected.ok() && !std::is_sorted(leaves.begin(), leaves.end(), by_key))
    std::stable_sort(leaves.begin(), leaves.end(), by_key);
  for (size_t i = 1; i < leaves.size() && collected.ok(); ++i) {
    if (leaves[i].flat_key != leaves[i - 1].flat_key) continue;
    collected = Status::InvalidArgument(
        "flat key '" + leaves[i].flat_key + "' collides: paths " +
        QuotePath(leaves[i - 1].path, leaves[i - 1].kinds) + " and " +
        QuotePath(leaves[i].path, leaves[i].kinds) + " join to the same key");
  }
  if (collected.ok()) return leaves;
  if constexpr (!kPaths) {
    // The message names paths: the same walk with them.
    return FlattenImpl<true, const Dict, FlatLeaf>(state).status();
  }
  return collected;
}

// The key a part addresses: its text as an int for int kinds.
Result<Key> KeyOf(const std::string& text, PathPartKind kind,
                  const std::string& flat_key) {
  if (kind == PathPartKind::kStrKey) return Key(text);
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    return Status::InvalidArgument("flat key '" + flat_key + "': path part '" +
                                   text + "' is recorded as an int but is not");
  }
  return Key(value);
}

// The container that holds the leaf at `keys` under `root`, each container on
// the way created as the kind its part says; nullptr when the path passes
// through a leaf or a container of another kind.
StateDict* Descend(StateDict& root, const std::vector<Key>& keys,
                   const PathKinds& kinds) {
  if (ContainerOf(kinds.front()) != root.kind()) return nullptr;
  StateDict* dict = &root;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    auto existing = dict->items().find(keys[i]);
    if (existing != dict->items().end() &&
        !std::holds_alternative<StateDict>(existing->second.node)) {
      return nullptr;
    }
    dict = &dict->Child(keys[i], ContainerOf(kinds[i + 1]));
    if (dict->kind() != ContainerOf(kinds[i + 1])) return nullptr;
  }
  return dict;
}

}  // namespace

ContainerKind ContainerOf(PathPartKind kind) {
  switch (kind) {
    case PathPartKind::kListIndex:
      return ContainerKind::kList;
    case PathPartKind::kTupleIndex:
      return ContainerKind::kTuple;
    case PathPartKind::kStrKey:
    case PathPartKind::kIntKey:
      break;
  }
  return ContainerKind::kDict;
}

const char* ContainerName(ContainerKind kind) {
  switch (kind) {
    case ContainerKind::kList:
      return "list";
    case ContainerKind::kTuple:
      return "tuple";
    case ContainerKind::kDict:
      break;
  }
  return "dict";
}

std::string JoinPath(const Path& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += '.';
    out += path[i];
  }
  return out;
}

std::string QuotePath(const Path& path, const PathKinds& kinds) {
  CKPTDB_ASSERT(kinds.empty() || kinds.size() == path.size());
  std::string out = "[";
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += ", ";
    const bool is_str = kinds.empty() || kinds[i] == PathPartKind::kStrKey;
    out += is_str ? "'" + path[i] + "'" : path[i];
  }
  return out + "]";
}

bool AllStrKeys(const PathKinds& kinds) {
  return std::all_of(kinds.begin(), kinds.end(),
                     [](PathPartKind k) { return k == PathPartKind::kStrKey; });
}

Result<std::vector<FlatLeaf>> Flatten(const StateDict& state) {
  CKPTDB_RETURN_IF_ERROR(state.error());
  return FlattenImpl<true, const StateDict, FlatLeaf>(state);
}

Result<std::vector<MutableFlatLeaf>> FlattenMutable(StateDict& state) {
  CKPTDB_RETURN_IF_ERROR(state.error());
  return FlattenImpl<false, StateDict, MutableFlatLeaf>(state);
}

Result<StateDict> Unflatten(
    const std::map<std::string, Value>& values,
    const std::map<std::string, Path>& flat_mapping,
    const std::map<std::string, PathKinds>& path_kinds) {
  StateDict out;
  for (const auto& [flat_key, value] : values) {
    auto it = flat_mapping.find(flat_key);
    if (it == flat_mapping.end() || it->second.empty()) {
      return Status::InvalidArgument("flat key '" + flat_key +
                                     "' has no path in the flat mapping");
    }
    const Path& path = it->second;
    auto recorded = path_kinds.find(flat_key);
    PathKinds kinds = recorded == path_kinds.end()
                          ? PathKinds(path.size(), PathPartKind::kStrKey)
                          : recorded->second;
    if (kinds.size() != path.size()) {
      return Status::InvalidArgument(
          "flat key '" + flat_key + "' has " + std::to_string(path.size()) +
          " path parts but " + std::to_string(kinds.size()) + " kinds");
    }
    std::vector<Key> keys;
    for (size_t i = 0; i < path.size(); ++i) {
      CKPTDB_ASSIGN_OR_RETURN(Key key, KeyOf(path[i], kinds[i], flat_key));
      keys.push_back(std::move(key));
    }
    StateDict* dict = Descend(out, keys, kinds);
    if (dict == nullptr || dict->GetChild(keys.back()) != nullptr) {
      return Status::InvalidArgument(
          "path " + QuotePath(path, kinds) + " of flat key '" + flat_key +
          "' conflicts with another path (a leaf or a container of another "
          "kind where it needs a container)");
    }
    dict->Set(keys.back(), value);
  }
  return out;
}

}  // namespace ckptdb::planner
