#include "planner/flatten.h"

#include <algorithm>

namespace ckptdb::planner {
namespace {

template <typename Dict, typename Leaf>
void Collect(Dict& dict, Path& path, std::vector<Leaf>& out) {
  for (auto& [key, entry] : dict.items()) {
    path.push_back(key);
    auto& node = entry.node;
    if (auto* child = std::get_if<StateDict>(&node)) {
      Collect(*child, path, out);
    } else {
      Leaf leaf;
      leaf.flat_key = JoinPath(path);
      leaf.path = path;
      if (auto* tensor = std::get_if<TensorView>(&node)) leaf.tensor = tensor;
      if (auto* value = std::get_if<Value>(&node)) leaf.value = value;
      out.push_back(std::move(leaf));
    }
    path.pop_back();
  }
}

std::string QuotePath(const Path& path) {
  std::string out = "[";
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += ", ";
    out += "'" + path[i] + "'";
  }
  return out + "]";
}

template <typename Dict, typename Leaf>
Result<std::vector<Leaf>> FlattenImpl(Dict& state) {
  std::vector<Leaf> leaves;
  Path path;
  Collect(state, path, leaves);
  std::stable_sort(
      leaves.begin(), leaves.end(),
      [](const Leaf& a, const Leaf& b) { return a.flat_key < b.flat_key; });
  for (size_t i = 1; i < leaves.size(); ++i) {
    if (leaves[i].flat_key == leaves[i - 1].flat_key) {
      return Status::InvalidArgument(
          "flat key '" + leaves[i].flat_key + "' collides: paths " +
          QuotePath(leaves[i - 1].path) + " and " + QuotePath(leaves[i].path) +
          " join to the same key");
    }
  }
  return leaves;
}

}  // namespace

std::string JoinPath(const Path& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += '.';
    out += path[i];
  }
  return out;
}

Result<std::vector<FlatLeaf>> Flatten(const StateDict& state) {
  return FlattenImpl<const StateDict, FlatLeaf>(state);
}

Result<std::vector<MutableFlatLeaf>> FlattenMutable(StateDict& state) {
  return FlattenImpl<StateDict, MutableFlatLeaf>(state);
}

Result<StateDict> Unflatten(const std::map<std::string, Value>& values,
                            const std::map<std::string, Path>& flat_mapping) {
  StateDict out;
  for (const auto& [flat_key, value] : values) {
    auto it = flat_mapping.find(flat_key);
    if (it == flat_mapping.end() || it->second.empty()) {
      return Status::InvalidArgument("flat key '" + flat_key +
                                     "' has no path in the flat mapping");
    }
    const Path& path = it->second;
    StateDict* dict = &out;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      auto existing = dict->items().find(path[i]);
      if (existing != dict->items().end() &&
          !std::holds_alternative<StateDict>(existing->second.node)) {
        return Status::InvalidArgument("path " + QuotePath(path) +
                                       " of flat key '" + flat_key +
                                       "' passes through a leaf");
      }
      dict = &dict->Child(path[i]);
    }
    if (dict->GetChild(path.back()) != nullptr) {
      return Status::InvalidArgument("path " + QuotePath(path) +
                                     " of flat key '" + flat_key +
                                     "' is also a nested dict");
    }
    dict->Set(path.back(), value);
  }
  return out;
}

}  // namespace ckptdb::planner
