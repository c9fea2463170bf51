#include "planner/save_plan.h"

#include <algorithm>
#include <queue>
#include <span>
#include <sstream>

#include "core/partition.h"
#include "core/sorted_maps.h"

namespace ckptdb::planner {
namespace {

// A shard of an owner: a rank in BuildSavePlan, a class of ranks in
// BuildClassSavePlan.
struct Holder {
  int owner;
  size_t shard;
};

struct ShardRef {
  const SaveShard* shard;
  Holder holder;
};

// The owners of a plan and the ranks behind each.
struct Owners {
  const std::vector<RankSaveLayout>& layouts;
  // ranks[o]: the ranks of owner o, ascending; empty for an owner no rank has.
  std::vector<std::vector<int>> ranks;
  int world;

  // The rank errors name for owner `o`.
  int Named(int o) const { return ranks[o].front(); }
};

std::string RankBox(int rank, const Box& box) {
  return "rank " + std::to_string(rank) + " box " + BoxToString(box);
}

// Every owner's shards with their flat keys (which view the layouts'),
// sorted by key; a key's shards in the order of their owners' lowest ranks.
using KeyedShards = std::vector<std::pair<std::string_view, ShardRef>>;

const char* ContainerOfPart(PathPartKind kind) {
  switch (kind) {
    case PathPartKind::kStrKey:
      return "a dict's str key";
    case PathPartKind::kIntKey:
      return "a dict's int key";
    case PathPartKind::kListIndex:
      return "a list index";
    case PathPartKind::kTupleIndex:
      return "a tuple index";
  }
  return "?";
}

// For one flat key whose paths read the same on `rank` and another rank
// (`a` and `b` are their kinds, parallel to `path`, or empty: every part a
// dict's str key): the message naming the first part that addresses another
// kind of container.
std::string OtherContainer(const std::string& key, const Path& path,
                           const PathKinds& a, const PathKinds& b, int rank) {
  auto kind = [](const PathKinds& kinds, size_t i) {
    return kinds.empty() ? PathPartKind::kStrKey : kinds[i];
  };
  for (size_t i = 0; i < path.size(); ++i) {
    if (kind(a, i) == kind(b, i)) continue;
    PathKinds prefix_kinds;
    if (!a.empty()) prefix_kinds.assign(a.begin(), a.begin() + i);
    const std::string under =
        i == 0 ? std::string("the root")
               : QuotePath(Path(path.begin(), path.begin() + i), prefix_kinds);
    return "flat key '" + key + "' is the path " + QuotePath(path, a) +
           " on rank " + std::to_string(rank) +
           " and on another rank, but its " + path[i] + " under " + under +
           " is " + ContainerOfPart(kind(a, i)) + " on rank " +
           std::to_string(rank) + " and " + ContainerOfPart(kind(b, i)) +
           " on the other: the ranks' state dicts disagree on their "
           "structure";
  }
  return "flat key '" + key + "' names different paths on rank " +
         std::to_string(rank) + " and another rank";
}

// The lowest rank whose state dict holds `key` (for a message).
int RankOfKey(const Owners& owners, const std::string& key) {
  int lowest = owners.world;
  for (int o = 0; o < static_cast<int>(owners.layouts.size()); ++o) {
    if (owners.ranks[o].empty() || owners.Named(o) >= lowest) continue;
    const RankSaveLayout& layout = owners.layouts[o];
    const bool holds =
        std::any_of(layout.shards.begin(), layout.shards.end(),
                    [&](const SaveShard& s) { return s.flat_key == key; }) ||
        std::any_of(layout.values.begin(), layout.values.end(),
                    [&](const SaveValue& v) { return v.flat_key == key; });
    if (holds) lowest = owners.Named(o);
  }
  return lowest;
}

// InvalidArgument unless the paths of all owners' keys form one tree: no key
// is a leaf on one rank and a container holding other keys on another, and
// each container is one kind (dict, list or tuple) on every rank. Ranks whose
// state dicts disagree so would commit a structure no state dict has. One
// owner's keys come from one state dict, a tree already.
Status CheckOneTree(const SavePlan& plan, const Owners& owners) {
  struct Entry {
    const std::string* key;
    const Path* path;
    const PathKinds* kinds;
  };
  static const PathKinds kAllStr;
  std::vector<Entry> entries;
  entries.reserve(plan.flat_mapping.size());
  auto kinds = plan.path_kinds.begin();  // its keys are some of the mapping's
  for (const auto& [key, path] : plan.flat_mapping) {
    const bool has_kinds =
        kinds != plan.path_kinds.end() && kinds->first == key;
    entries.push_back({&key, &path, has_kinds ? &kinds->second : &kAllStr});
    if (has_kinds) ++kinds;
  }
  // Ordered part by part, each part by its text, then its kind: a node's
  // descendants (the paths through its parts and kinds) come together, right
  // after the node itself, so a leaf that is also a container, and children
  // of one node that address different containers, meet as neighbours.
  const auto kind = [](const Entry& e, size_t i) {
    return e.kinds->empty() ? PathPartKind::kStrKey : (*e.kinds)[i];
  };
  // The first part where `a` and `b` differ, in text or kind.
  const auto first_difference = [&](const Entry& a, const Entry& b) {
    const size_t n = std::min(a.path->size(), b.path->size());
    size_t d = 0;
    while (d < n && (*a.path)[d] == (*b.path)[d] && kind(a, d) == kind(b, d))
      ++d;
    return d;
  };
  const auto before = [&](const Entry& a, const Entry& b) {
    const size_t d = first_difference(a, b);
    if (d == b.path->size()) return false;  // b is a or a prefix of it
    if (d == a.path->size()) return true;
    const int c = (*a.path)[d].compare((*b.path)[d]);
    return c < 0 || (c == 0 && kind(a, d) < kind(b, d));
  };
  // Usually in order already: the flat keys' order is the paths' unless a
  // part holds a character that sorts before '.'.
  if (!std::is_sorted(entries.begin(), entries.end(), before))
    std::sort(entries.begin(), entries.end(), before);
  for (size_t i = 1; i < entries.size(); ++i) {
    const Entry& a = entries[i - 1];
    const Entry& b = entries[i];
    const size_t d = first_difference(a, b);
    if (d == a.path->size()) {
      return Status::InvalidArgument(
          "key '" + *a.key + "' is " +
          (plan.values.contains(*a.key) ? "a small value" : "a tensor") +
          " on rank " + std::to_string(RankOfKey(owners, *a.key)) +
          " but a container on rank " +
          std::to_string(RankOfKey(owners, *b.key)) + ", which holds '" +
          *b.key +
          "' under it: the ranks' state dicts disagree on their "
          "structure");
    }
    if (d == b.path->size()) continue;  // not in this order
    const ContainerKind ca = ContainerOf(kind(a, d));
    const ContainerKind cb = ContainerOf(kind(b, d));
    if (ca != cb) {
      const Path prefix(a.path->begin(), a.path->begin() + d);
      PathKinds prefix_kinds;
      if (!a.kinds->empty())
        prefix_kinds.assign(a.kinds->begin(), a.kinds->begin() + d);
      return Status::InvalidArgument(
          "the container at " +
          (d == 0 ? std::string("the root") : QuotePath(prefix, prefix_kinds)) +
          " is a " + ContainerName(ca) + " on rank " +
          std::to_string(RankOfKey(owners, *a.key)) + " (which holds '" +
          *a.key + "') but a " + ContainerName(cb) + " on rank " +
          std::to_string(RankOfKey(owners, *b.key)) + " (which holds '" +
          *b.key + "'): the ranks' state dicts disagree on their structure");
    }
  }
  return Status::OK();
}

// Every owner's shards by key (`by_key`); values and the flat mapping go
// straight into `plan`.
// The lowest rank whose layout has the small value `key`.
int ValueRank(const Owners& owners, const std::vector<int>& order,
              std::string_view key) {
  for (const int o : order) {
    for (const SaveValue& v : owners.layouts[o].values) {
      if (v.flat_key == key) return owners.Named(o);
    }
  }
  return -1;
}

Status GroupByKey(const Owners& owners, SavePlan* plan, KeyedShards* by_key) {
  auto add_path = [&](const std::string& key, const Path& path,
                      const PathKinds& kinds, int rank) -> Status {
    if (InsertNew(plan->flat_mapping, key, path)) {
      if (!kinds.empty()) InsertNew(plan->path_kinds, key, kinds);
      return Status::OK();
    }
    auto it = plan->flat_mapping.find(key);
    auto known = plan->path_kinds.find(key);
    const PathKinds& known_kinds =
        known == plan->path_kinds.end() ? PathKinds() : known->second;
    if (it->second != path || known_kinds != kinds) {
      const std::string here = QuotePath(path, kinds);
      const std::string there = QuotePath(it->second, known_kinds);
      if (here == there) {
        return Status::InvalidArgument(
            OtherContainer(key, path, kinds, known_kinds, rank));
      }
      return Status::InvalidArgument("flat key '" + key +
                                     "' names different paths on rank " +
                                     std::to_string(rank) + " (" + here +
                                     ") and another rank (" + there + ")");
    }
    return Status::OK();
  };
  // Owners in the order of their lowest rank, so that errors and values come
  // from the lowest rank as with one owner per rank.
  std::vector<int> order;
  for (int o = 0; o < static_cast<int>(owners.ranks.size()); ++o) {
    if (!owners.ranks[o].empty()) order.push_back(o);
  }
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return owners.Named(a) < owners.Named(b); });
  for (const int o : order) {
    const RankSaveLayout& layout = owners.layouts[o];
    for (size_t i = 0; i < layout.shards.size(); ++i) {
      const SaveShard& s = layout.shards[i];
      CKPTDB_RETURN_IF_ERROR(
          add_path(s.flat_key, s.path, s.kinds, owners.Named(o)));
      by_key->push_back({s.flat_key, {&s, {o, i}}});
    }
    for (const SaveValue& v : layout.values) {
      CKPTDB_RETURN_IF_ERROR(
          add_path(v.flat_key, v.path, v.kinds, owners.Named(o)));
      InsertNew(plan->values, v.flat_key, v.value);
    }
  }
  // Stable: each key's shards keep their owners' order. One owner's come
  // sorted (a layout is in key order).
  const auto by_name = [](const auto& a, const auto& b) {
    return a.first < b.first;
  };
  if (!std::is_sorted(by_key->begin(), by_key->end(), by_name))
    std::stable_sort(by_key->begin(), by_key->end(), by_name);
  // A key both a small value and a tensor: one walk of both sorted lists.
  auto tensor = by_key->begin();
  for (const auto& [key, value] : plan->values) {
    while (tensor != by_key->end() && tensor->first < key) ++tensor;
    if (tensor == by_key->end()) break;
    if (tensor->first != key) continue;
    return Status::InvalidArgument(
        "key '" + key + "' is a small value on rank " +
        std::to_string(ValueRank(owners, order, key)) +
        " and a tensor on rank " +
        std::to_string(owners.Named(tensor->second.holder.owner)));
  }
  return order.size() > 1 ? CheckOneTree(*plan, owners) : Status::OK();
}

// Checks that every rank gives `key` the same dtype and global shape.
Status CheckAgreement(std::string_view key, const std::vector<ShardRef>& refs,
                      const Owners& owners) {
  const SaveShard& first = *refs.front().shard;
  for (const ShardRef& ref : refs) {
    if (ref.shard->dtype != first.dtype ||
        ref.shard->global_shape != first.global_shape) {
      return Status::InvalidArgument(
          "tensor '" + std::string(key) + "': rank " +
          std::to_string(owners.Named(refs.front().holder.owner)) + " has " +
          std::string(DTypeName(first.dtype)) + " " +
          ShapeToString(first.global_shape) + " but rank " +
          std::to_string(owners.Named(ref.holder.owner)) + " has " +
          std::string(DTypeName(ref.shard->dtype)) + " " +
          ShapeToString(ref.shard->global_shape));
    }
  }
  return Status::OK();
}

Status LayoutError(std::string_view key, const Shape& shape,
                   const std::vector<ShardRef>& refs, const Owners& owners,
                   const PartitionProblem& p) {
  if (p.error == PartitionError::kNone) return Status::OK();
  const std::string tensor = "tensor '" + std::string(key) + "'";
  const std::string global = ShapeToString(shape);
  auto rank_box = [&](size_t i) {
    return RankBox(owners.Named(refs[i].holder.owner), refs[i].shard->box);
  };
  switch (p.error) {
    case PartitionError::kNone:
      return Status::OK();
    case PartitionError::kBadShape:
      return Status::InvalidArgument(
          tensor + ": global shape " + global +
          " has a negative extent or more than 2^62 elements");
    case PartitionError::kWrongRank:
      return Status::InvalidArgument(
          tensor + " on rank " +
          std::to_string(owners.Named(refs[p.box].holder.owner)) + ": shard " +
          BoxToString(refs[p.box].shard->box) + " does not match the " +
          std::to_string(shape.size()) + "-d global shape " + global);
    case PartitionError::kOutside:
    case PartitionError::kEmptyBox:  // allowed: not reported
      return Status::InvalidArgument(tensor + ": shard on " + rank_box(p.box) +
                                     " lies outside the global shape " +
                                     global);
    case PartitionError::kOverlap:
      return Status::InvalidArgument(tensor + ": shards on " + rank_box(p.box) +
                                     " and " + rank_box(p.other_box) +
                                     " overlap in " + BoxToString(p.overlap) +
                                     " but are not identical replicas");
    case PartitionError::kGap:
      break;
  }
  const std::string missing =
      p.missing_element ? "element " + ShapeToString(*p.missing_element)
                        : std::string("the rest");
  if (p.covered >= p.total) {  // the shards also overlap elsewhere
    return Status::InvalidArgument(
        tensor + " " + global + ": no rank holds " + missing +
        ", and the shards of all ranks overlap elsewhere (they hold " +
        std::to_string(p.covered) + " elements of " + std::to_string(p.total) +
        ")");
  }
  return Status::InvalidArgument(
      tensor + " " + global + ": the shards of all ranks cover " +
      std::to_string(p.covered) + " of " + std::to_string(p.total) +
      " elements (a gap: no rank holds " + missing + ")");
}

// Checks that the shards of `key`, replicas counted once, partition it
// (`boxes`: scratch, reused from key to key).
Status CheckLayout(std::string_view key, const std::vector<ShardRef>& refs,
                   const Owners& owners, std::vector<const Box*>& boxes) {
  const Shape& shape = refs.front().shard->global_shape;
  boxes.clear();
  for (const ShardRef& ref : refs) boxes.push_back(&ref.shard->box);
  const PartitionProblem problem = CheckPartitionOfPointers(
      shape, boxes, {.allow_replicas = true, .allow_empty_boxes = true});
  return LayoutError(key, shape, refs, owners, problem);
}

struct Distinct {
  const Box* box;  // the first holder's shard's
  // Ascending owner.
  std::vector<Holder> holders;
};

// The distinct non-empty boxes of `refs`, each with the owners holding it:
// the first elements of `distinct`, whose memory is reused from key to key.
std::span<const Distinct> GroupReplicas(std::vector<ShardRef>& refs,
                                        std::vector<Distinct>& distinct) {
  const auto by_box = [](const ShardRef& a, const ShardRef& b) {
    return a.shard->box < b.shard->box;
  };
  // Mostly one shard, or shards in box order already (a stable sort takes a
  // buffer from the heap even for one element).
  if (!std::is_sorted(refs.begin(), refs.end(), by_box))
    std::stable_sort(refs.begin(), refs.end(), by_box);
  size_t n = 0;
  for (const ShardRef& ref : refs) {
    if (ref.shard->box.volume() == 0) continue;
    if (n == 0 || *distinct[n - 1].box != ref.shard->box) {
      if (n == distinct.size()) distinct.emplace_back();
      distinct[n].box = &ref.shard->box;
      distinct[n].holders.clear();
      ++n;
    }
    distinct[n - 1].holders.push_back(ref.holder);
  }
  for (size_t i = 0; i < n; ++i) {
    std::sort(
        distinct[i].holders.begin(), distinct[i].holders.end(),
        [](const Holder& a, const Holder& b) { return a.owner < b.owner; });
  }
  return {distinct.data(), n};
}

// The writer turns: the holder ranks of a box (ascending) take turns over the
// chunks of every box with exactly those holders, in plan order.
class WriterTurns {
 public:
  // The ranks holding `d`, ascending, with the owner (and so the shard)
  // behind each.
  void HoldersOf(const Distinct& d, const Owners& owners) {
    ranks_.clear();
    for (size_t h = 0; h < d.holders.size(); ++h) {
      for (int r : owners.ranks[d.holders[h].owner]) ranks_.push_back({r, h});
    }
    std::sort(ranks_.begin(), ranks_.end());
    key_.resize(ranks_.size());
    for (size_t i = 0; i < ranks_.size(); ++i) key_[i] = ranks_[i].first;
  }
  // The turn of the first chunk of the current box; advances by `chunks`. The
  // first box of a holder set starts at turn `start`.
  uint64_t Take(uint64_t chunks, uint64_t start) {
    uint64_t& turn = turns_.try_emplace(key_, start).first->second;
    const uint64_t first = turn;
    turn += chunks;
    return first;
  }
  // The holder taking turn `turn`: (rank, index into the box's holders).
  const std::pair<int, size_t>& At(uint64_t turn) const {
    return ranks_[turn % ranks_.size()];
  }
  bool Holds(int rank) const {
    return std::binary_search(key_.begin(), key_.end(), rank);
  }

 private:
  std::map<std::vector<int>, uint64_t> turns_;
  std::vector<std::pair<int, size_t>> ranks_;
  std::vector<int> key_;
};

// Assigns the writers of `d` (a box of `tensor`): counts every rank's bytes,
// and keeps the chunks (all, or those of `only_writer`). `pieces`: scratch.
void AssignWriters(const Distinct& d, const Owners& owners,
                   size_t max_chunk_bytes, int only_writer, WriterTurns& turns,
                   std::vector<Box>& pieces, PlannedTensor& tensor,
                   SavePlan* plan) {
  const size_t elem = DTypeSize(tensor.dtype);
  turns.HoldersOf(d, owners);
  const SplitSizes sizes = SplitBoxSizes(*d.box, elem, max_chunk_bytes);
  // Holder sets start their turns at the ordinal the box's first chunk would
  // have among equal chunks: sets that begin in different places start with
  // different holders.
  const uint64_t first =
      turns.Take(sizes.count(),
                 plan->total_bytes / std::max<uint64_t>(1, sizes.piece_bytes));
  uint64_t turn = first;
  for (uint64_t run = 0; run < sizes.runs; ++run) {
    for (uint64_t j = 0; j < sizes.per_run; ++j) {
      const uint64_t bytes =
          j + 1 == sizes.per_run ? sizes.last_bytes : sizes.piece_bytes;
      plan->bytes_per_rank[turns.At(turn++).first] += bytes;
    }
  }
  plan->total_bytes += static_cast<uint64_t>(d.box->volume()) * elem;
  if (only_writer >= 0 && !turns.Holds(only_writer)) return;
  turn = first;
  SplitBox(*d.box, elem, max_chunk_bytes, pieces);
  for (Box& piece : pieces) {
    const auto& [rank, h] = turns.At(turn++);
    if (only_writer >= 0 && rank != only_writer) continue;
    const uint64_t bytes = static_cast<uint64_t>(piece.volume()) * elem;
    tensor.chunks.push_back(
        {std::move(piece), rank, d.holders[h].shard, bytes});
  }
}

// Plans the save of `owners`' layouts (see BuildClassSavePlan).
Result<SavePlan> PlanOwners(const Owners& owners, size_t max_chunk_bytes,
                            int only_writer) {
  if (max_chunk_bytes == 0)
    return Status::InvalidArgument("max_chunk_bytes must be > 0");
  SavePlan plan;
  plan.bytes_per_rank.assign(owners.world, 0);
  KeyedShards by_key;
  CKPTDB_RETURN_IF_ERROR(GroupByKey(owners, &plan, &by_key));
  size_t keys = 0;  // one tensor per distinct key (by_key is sorted by key)
  for (size_t i = 0; i < by_key.size(); ++i)
    keys += i == 0 || by_key[i].first != by_key[i - 1].first;
  plan.tensors.reserve(keys);
  WriterTurns turns;
  // One key's, reused from key to key.
  std::vector<ShardRef> refs;
  std::vector<const Box*> boxes;
  std::vector<Distinct> distinct;
  std::vector<Box> pieces;
  for (size_t next = 0; next < by_key.size();) {
    const std::string_view key = by_key[next].first;
    refs.clear();
    for (; next < by_key.size() && by_key[next].first == key; ++next)
      refs.push_back(by_key[next].second);
    CKPTDB_RETURN_IF_ERROR(CheckAgreement(key, refs, owners));
    CKPTDB_RETURN_IF_ERROR(CheckLayout(key, refs, owners, boxes));
    const SaveShard& first = *refs.front().shard;
    PlannedTensor& tensor = plan.tensors.emplace_back(
        PlannedTensor{std::string(key), first.dtype, first.global_shape, {}});
    for (const Distinct& d : GroupReplicas(refs, distinct)) {
      AssignWriters(d, owners, max_chunk_bytes, only_writer, turns, pieces,
                    tensor, &plan);
    }
    std::sort(tensor.chunks.begin(), tensor.chunks.end(),
              [](const PlannedChunk& a, const PlannedChunk& b) {
                return a.box < b.box;
              });
  }
  return plan;
}

}  // namespace

std::string SavePlan::ToString() const {
  std::ostringstream out;
  for (const auto& t : tensors) {
    out << t.flat_key << " " << DTypeName(t.dtype) << " "
        << ShapeToString(t.global_shape) << "\n";
    for (const auto& c : t.chunks) {
      out << "  " << BoxToString(c.box) << " writer " << c.writer_rank
          << " shard " << c.source_shard << " bytes " << c.nbytes << "\n";
    }
  }
  for (const auto& [key, value] : values)
    out << key << " value " << ValueTypeName(value) << "\n";
  return out.str();
}

Result<SavePlan> BuildSavePlan(const std::vector<RankSaveLayout>& ranks,
                               size_t max_chunk_bytes) {
  const int world = static_cast<int>(ranks.size());
  Owners owners{ranks, std::vector<std::vector<int>>(world), world};
  for (int r = 0; r < world; ++r) owners.ranks[r] = {r};
  return PlanOwners(owners, max_chunk_bytes, -1);
}

Result<SavePlan> BuildClassSavePlan(const SaveClasses& classes,
                                    size_t max_chunk_bytes, int only_writer) {
  const int world = static_cast<int>(classes.class_of_rank.size());
  Owners owners{classes.layouts,
                std::vector<std::vector<int>>(classes.layouts.size()), world};
  for (int r = 0; r < world; ++r)
    owners.ranks[classes.class_of_rank[r]].push_back(r);
  return PlanOwners(owners, max_chunk_bytes, only_writer);
}

}  // namespace ckptdb::planner
