#include "planner/load_plan.h"

#include <algorithm>
#include <map>
#include <span>
#include <sstream>

#include "core/sorted_maps.h"
#include "planner/box_index.h"

namespace ckptdb::planner {
namespace {

Shape Sub(const Shape& a, const Shape& b) {
  Shape out(a.size());
  for (size_t d = 0; d < a.size(); ++d) out[d] = a[d] - b[d];
  return out;
}

using Tensors = std::map<std::string, TensorMetadata>;

// InvalidArgument unless `target` names a tensor of the checkpoint and lies
// inside it; `who` names the rank. With `near`, the tensor is sought from
// there (FindNear), and `*near` becomes it.
Status CheckTarget(const Tensors& tensors, const LoadTarget& target,
                   const std::string& who,
                   Tensors::const_iterator* near = nullptr) {
  auto it = near != nullptr ? FindNear(tensors, *near, target.flat_key)
                            : tensors.find(target.flat_key);
  if (near != nullptr) *near = it;
  if (it == tensors.end()) {
    return Status::InvalidArgument("load target '" + target.flat_key + "' on " +
                                   who + " is not a tensor of the checkpoint");
  }
  const Shape& shape = it->second.global_shape;
  const Box& box = target.box;
  bool inside =
      box.shape.size() == shape.size() && box.origin.size() == shape.size();
  for (size_t d = 0; inside && d < shape.size(); ++d) {
    inside = box.shape[d] >= 0 && box.origin[d] >= 0 &&
             box.origin[d] <= shape[d] &&
             box.shape[d] <= shape[d] - box.origin[d];
  }
  if (!inside) {
    return Status::InvalidArgument("load target '" + target.flat_key + "' on " +
                                   who + ": " + BoxToString(target.box) +
                                   " lies outside the stored shape " +
                                   ShapeToString(shape));
  }
  return Status::OK();
}

// The chunks of one stored tensor, indexed, with each chunk's position.
struct StoredTensor {
  const TensorMetadata* meta = nullptr;
  BoxIndex index;
  // position[c]: chunk c's first byte in the checkpoint's byte order.
  std::vector<uint64_t> position;

  StoredTensor() = default;
  StoredTensor(const TensorMetadata& m, uint64_t base) { Reset(m, base); }

  // Holds tensor `m`, whose bytes begin at `base`, instead, in the memory it
  // has (a rank's plan takes tensor after tensor).
  void Reset(const TensorMetadata& m, uint64_t base) {
    meta = &m;
    chunk_boxes_.clear();
    position.clear();
    for (const ChunkMetadata& c : m.chunks) {
      chunk_boxes_.push_back(&c.box);
      position.push_back(base);
      base += c.nbytes;
    }
    index.Rebuild(chunk_boxes_, m.global_shape.size());
  }

 private:
  std::vector<const Box*> chunk_boxes_;
};

// A whole tensor's bytes.
uint64_t TensorBytes(const TensorMetadata& t) {
  return static_cast<uint64_t>(NumElements(t.global_shape)) *
         DTypeSize(t.dtype);
}

// Where each tensor's bytes begin in the checkpoint's byte order (every tensor
// in key order, whole).
std::map<std::string_view, uint64_t> TensorBases(
    const std::map<std::string, TensorMetadata>& tensors) {
  std::map<std::string_view, uint64_t> bases;
  uint64_t at = 0;
  for (const auto& [key, t] : tensors) {
    bases.emplace(key, at);
    at += TensorBytes(t);
  }
  return bases;
}

// The reader rule: the needers of a chunk (ascending) share the chunks that
// have exactly those needers, in (key, chunk) order: each goes to the needer
// given the fewest of their bytes so far, among equals to the one whose turn
// it is (turns go round the needers). Chunks of unequal sizes thus spread
// their bytes, not only their count, evenly. Every needer of a chunk sees
// every chunk with the same needers, so each computes the same reader. `Key`
// identifies a needer set (ranks, or classes of ranks).
template <typename Key>
class ReaderTurns {
 public:
  // The reader of the next chunk needed by `needers` (whose set `key` names),
  // at `position` with `nbytes`. A needer set's first chunk takes turn
  // position / nbytes, its ordinal among equal chunks, so that sets beginning
  // in different places start with different needers.
  int Next(const Key& key, const std::vector<int>& needers, uint64_t position,
           uint64_t nbytes) {
    CKPTDB_ASSERT(!needers.empty());
    const size_t n = needers.size();
    auto [it, added] = sets_.try_emplace(key);
    Shares& shares = it->second;
    if (added) {
      shares.turn = position / std::max<uint64_t>(1, nbytes);
      shares.bytes.assign(n, 0);
    }
    CKPTDB_ASSERT(shares.bytes.size() == n);
    size_t reader = shares.turn % n;
    for (size_t i = 1; i < n; ++i) {
      const size_t next = (shares.turn + i) % n;
      if (shares.bytes[next] < shares.bytes[reader]) reader = next;
    }
    ++shares.turn;
    shares.bytes[reader] += nbytes;
    return needers[reader];
  }

 private:
  struct Shares {
    uint64_t turn = 0;
    std::vector<uint64_t> bytes;  // given to each needer so far
  };
  std::map<Key, Shares> sets_;
};

struct Need {
  int dest_rank;
  size_t target;
  Box common;
};

// Appends the read of `chunk` of `stored` and one item per need (sorted by
// dest rank and target).
void EmitRead(std::string_view key, const StoredTensor& stored, size_t chunk,
              int reader, std::vector<Need>& needs,
              const std::vector<std::vector<LoadTarget>>& targets_of_rank_class,
              const std::function<size_t(int)>& class_of, LoadPlan* plan) {
  const ChunkMetadata& c = stored.meta->chunks[chunk];
  const size_t read = plan->reads.size();
  plan->reads.push_back({key, chunk, reader, c.nbytes, stored.position[chunk]});
  std::sort(needs.begin(), needs.end(), [](const Need& a, const Need& b) {
    return a.dest_rank != b.dest_rank ? a.dest_rank < b.dest_rank
                                      : a.target < b.target;
  });
  for (Need& need : needs) {
    const Shape& target_offset =
        targets_of_rank_class[class_of(need.dest_rank)][need.target].box.origin;
    plan->items.push_back({read, need.dest_rank, need.target,
                           Box{Sub(need.common.origin, c.box.origin),
                               std::move(need.common.shape)},
                           Sub(need.common.origin, target_offset)});
  }
}

}  // namespace

std::string LoadPlan::ToString() const {
  std::ostringstream out;
  for (size_t r = 0; r < reads.size(); ++r) {
    out << "read " << r << ": " << reads[r].flat_key << " chunk "
        << reads[r].chunk << " by rank " << reads[r].reader_rank << " ("
        << reads[r].nbytes << " bytes at " << reads[r].position << ")\n";
  }
  for (const auto& item : items) {
    out << "  item read " << item.read << " -> rank " << item.dest_rank
        << " target " << item.target << " src "
        << ShapeToString(item.box.origin) << " dst "
        << ShapeToString(item.dest_origin) << " len "
        << ShapeToString(item.box.shape) << "\n";
  }
  return out.str();
}

Result<LoadPlan> BuildLoadPlan(
    const std::map<std::string, TensorMetadata>& tensors,
    const std::vector<std::vector<LoadTarget>>& targets) {
  const int num_ranks = static_cast<int>(targets.size());
  for (int r = 0; r < num_ranks; ++r) {
    for (const LoadTarget& target : targets[r]) {
      CKPTDB_RETURN_IF_ERROR(
          CheckTarget(tensors, target, "rank " + std::to_string(r)));
    }
  }
  // Per requested tensor, in key order: its chunks and, per chunk, the boxes
  // of it that targets need.
  struct Needs {
    StoredTensor stored;
    std::vector<std::vector<Need>> by_chunk;
  };
  const auto bases = TensorBases(tensors);
  std::map<std::string_view, Needs> by_tensor;
  for (int r = 0; r < num_ranks; ++r) {
    for (size_t t = 0; t < targets[r].size(); ++t) {
      const LoadTarget& target = targets[r][t];
      if (target.box.volume() == 0) continue;
      auto entry = by_tensor.find(target.flat_key);
      if (entry == by_tensor.end()) {
        auto it = tensors.find(target.flat_key);
        entry =
            by_tensor
                .emplace(it->first,
                         Needs{StoredTensor(it->second, bases.at(it->first)),
                               std::vector<std::vector<Need>>(
                                   it->second.chunks.size())})
                .first;
      }
      Needs& needs = entry->second;
      needs.stored.index.ForEachOverlap(
          target.box, [&](size_t chunk, const Box& common) {
            needs.by_chunk[chunk].push_back({r, t, common});
          });
    }
  }

  LoadPlan plan;
  plan.read_bytes_per_rank.assign(num_ranks, 0);
  ReaderTurns<std::vector<int>> turns;
  std::vector<int> needers;
  for (auto& [key, needs] : by_tensor) {
    for (size_t c = 0; c < needs.by_chunk.size(); ++c) {
      if (needs.by_chunk[c].empty()) continue;
      needers.clear();
      for (const Need& n : needs.by_chunk[c]) needers.push_back(n.dest_rank);
      std::sort(needers.begin(), needers.end());
      needers.erase(std::unique(needers.begin(), needers.end()), needers.end());
      const int reader = turns.Next(needers, needers, needs.stored.position[c],
                                    needs.stored.meta->chunks[c].nbytes);
      plan.read_bytes_per_rank[reader] += needs.stored.meta->chunks[c].nbytes;
      EmitRead(
          key, needs.stored, c, reader, needs.by_chunk[c], targets,
          [](int r) { return static_cast<size_t>(r); }, &plan);
    }
  }
  return plan;
}

namespace {

// One class's target of one tensor, in the per-tensor index of
// BuildRankLoadPlan.
struct Owner {
  int cls;
  size_t target;
};

// The ranks of `classes` (ascending class ids), merged in ascending order.
void MergeRanks(const std::vector<int>& classes,
                const std::vector<std::vector<int>>& ranks_of_class,
                std::vector<int>* out) {
  out->clear();
  for (int c : classes) {
    const auto& ranks = ranks_of_class[c];
    const size_t mid = out->size();
    out->insert(out->end(), ranks.begin(), ranks.end());
    std::inplace_merge(out->begin(), out->begin() + static_cast<long>(mid),
                       out->end());
  }
}

// The needs `rank` (of class `mine`) plans for a chunk read by `reader`, into
// `needs`: every needer's when it reads it, else its own, plus those of ranks
// receiving the same box into device targets when it receives into one.
void RankNeeds(const std::vector<std::pair<Owner, Box>>& hits,
               const TargetClasses& classes,
               const std::vector<std::vector<int>>& ranks_of_class, int rank,
               int mine, int reader, std::vector<Need>& needs) {
  needs.clear();
  auto on_device = [&](const Owner& o) {
    return !classes.placements.empty() &&
           classes.placements[o.cls][o.target].on_device;
  };
  std::vector<const Box*> device_boxes;
  for (const auto& [owner, common] : hits) {
    if (owner.cls == mine && reader != rank) {
      needs.push_back({rank, owner.target, common});
      if (on_device(owner)) device_boxes.push_back(&common);
    }
  }
  for (const auto& [owner, common] : hits) {
    const bool all = reader == rank;
    const bool co_receiver =
        !all && on_device(owner) &&
        std::any_of(device_boxes.begin(), device_boxes.end(),
                    [&](const Box* b) { return *b == common; });
    if (!all && !co_receiver) continue;
    for (int r : ranks_of_class[owner.cls]) {
      if (r == rank && !all) continue;  // its own needs are in already
      needs.push_back({r, owner.target, common});
    }
  }
}

// The ranks of each class, ascending.
std::vector<std::vector<int>> RanksOfClass(const TargetClasses& classes) {
  std::vector<std::vector<int>> ranks_of_class(classes.targets.size());
  for (int r = 0; r < static_cast<int>(classes.class_of_rank.size()); ++r)
    ranks_of_class[classes.class_of_rank[r]].push_back(r);
  return ranks_of_class;
}

// Items grouped by tensor key, the keys ascending: group k holds the items
// of keys[k], in the order they were given.
template <typename Item>
struct ByKey {
  std::vector<std::string_view> keys;
  std::vector<Item> items;
  std::vector<size_t> first;  // group k is items [first[k], first[k + 1])

  std::span<const Item> Of(size_t k) const {
    return {items.data() + first[k], first[k + 1] - first[k]};
  }
};

// A class's non-empty targets, by tensor key. Targets usually come sorted by
// key (a state dict's leaves are): then no sort.
ByKey<const LoadTarget*> TargetsByKey(const std::vector<LoadTarget>& targets) {
  ByKey<const LoadTarget*> out;
  for (const LoadTarget& target : targets) {
    if (target.box.volume() > 0) out.items.push_back(&target);
  }
  const auto by_key = [](const LoadTarget* a, const LoadTarget* b) {
    return a->flat_key < b->flat_key;
  };
  if (!std::is_sorted(out.items.begin(), out.items.end(), by_key))
    std::stable_sort(out.items.begin(), out.items.end(), by_key);
  for (size_t i = 0; i < out.items.size(); ++i) {
    const std::string_view key = out.items[i]->flat_key;
    if (out.keys.empty() || out.keys.back() != key) {
      out.keys.push_back(key);
      out.first.push_back(i);
    }
  }
  out.first.push_back(out.items.size());
  return out;
}

// Every class's targets of the tensors in `keys`, by key, in class and target
// order: one pass over all targets, not one per tensor.
ByKey<Owner> OwnersOfKeys(const TargetClasses& classes,
                          const std::vector<std::vector<int>>& ranks_of_class,
                          const std::vector<std::string_view>& keys) {
  // Each owner with the index of its key; targets in key order find it at or
  // just after the previous one's.
  std::vector<std::pair<size_t, Owner>> found;
  std::vector<size_t> count(keys.size() + 1, 0);
  for (size_t c = 0; c < classes.targets.size(); ++c) {
    if (ranks_of_class[c].empty()) continue;
    size_t k = 0;
    for (size_t t = 0; t < classes.targets[c].size(); ++t) {
      const LoadTarget& target = classes.targets[c][t];
      if (target.box.volume() == 0) continue;
      const std::string_view key = target.flat_key;
      if (k >= keys.size() || keys[k] != key) {
        if (k + 1 < keys.size() && keys[k + 1] == key) {
          ++k;
        } else {
          k = static_cast<size_t>(
              std::lower_bound(keys.begin(), keys.end(), key) - keys.begin());
          if (k == keys.size() || keys[k] != key) continue;  // not wanted
        }
      }
      found.push_back({k, {static_cast<int>(c), t}});
      ++count[k + 1];
    }
  }
  ByKey<Owner> out;
  out.keys = keys;
  out.first.assign(keys.size() + 1, 0);
  for (size_t k = 0; k < keys.size(); ++k)
    out.first[k + 1] = out.first[k] + count[k + 1];
  // Placed by key, keeping class and target order within each.
  std::vector<size_t> at(out.first.begin(), out.first.end() - 1);
  out.items.resize(found.size());
  for (const auto& [k, owner] : found) out.items[at[k]++] = owner;
  return out;
}

// The reads one rank plans, tensor by tensor, with the reader turns they
// share.
struct RankReads {
  const TargetClasses& classes;
  const std::vector<std::vector<int>>& ranks_of_class;
  int rank;
  int mine;  // the rank's class
  LoadPlan plan{};
  ReaderTurns<std::vector<int>> turns{};
  // Each chunk's, reused from chunk to chunk.
  std::vector<std::pair<Owner, Box>> hits{};
  std::vector<int> needer_classes{}, needers{};
  std::vector<Need> needs{};
  // Each tensor's, reused from tensor to tensor.
  std::vector<size_t> chunks{};
  std::vector<const Box*> target_boxes{};
  BoxIndex targets{};  // of target_boxes

  // The chunks of tensor `name` that this rank needs (through `my_targets`),
  // each with its reader among all its needers (`owners`: every class's
  // targets of the tensor) and the needs this rank plans for it.
  void PlanTensor(const std::string& name, const StoredTensor& stored,
                  std::span<const LoadTarget* const> my_targets,
                  std::span<const Owner> owners) {
    const TensorMetadata& meta = *stored.meta;
    target_boxes.clear();
    for (const Owner& o : owners)
      target_boxes.push_back(&classes.targets[o.cls][o.target].box);
    targets.Rebuild(target_boxes, meta.global_shape.size());
    ChunksNeeded(stored, my_targets, chunks);
    for (size_t c : chunks) {
      const ChunkMetadata& chunk = meta.chunks[c];
      hits.clear();
      needer_classes.clear();
      targets.ForEachOverlap(chunk.box, [&](size_t b, const Box& common) {
        hits.emplace_back(owners[b], common);
        needer_classes.push_back(owners[b].cls);
      });
      std::sort(needer_classes.begin(), needer_classes.end());
      needer_classes.erase(
          std::unique(needer_classes.begin(), needer_classes.end()),
          needer_classes.end());
      MergeRanks(needer_classes, ranks_of_class, &needers);
      const int reader =
          turns.Next(needers, needers, stored.position[c], chunk.nbytes);
      RankNeeds(hits, classes, ranks_of_class, rank, mine, reader, needs);
      EmitRead(
          name, stored, c, reader, needs, classes.targets,
          [&](int r) { return static_cast<size_t>(classes.class_of_rank[r]); },
          &plan);
    }
  }

  // The chunks of `stored` that `my_targets` overlap, ascending, into
  // `chunks`.
  static void ChunksNeeded(const StoredTensor& stored,
                           std::span<const LoadTarget* const> my_targets,
                           std::vector<size_t>& chunks) {
    chunks.clear();
    for (const LoadTarget* target : my_targets) {
      stored.index.ForEachMeeting(target->box,
                                  [&](size_t c) { chunks.push_back(c); });
    }
    std::sort(chunks.begin(), chunks.end());
    chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  }
};

}  // namespace

Result<LoadPlan> BuildRankLoadPlan(
    const std::map<std::string, TensorMetadata>& tensors,
    const TargetClasses& classes, int rank) {
  const std::vector<std::vector<int>> ranks_of_class = RanksOfClass(classes);
  for (size_t c = 0; c < ranks_of_class.size(); ++c) {
    if (ranks_of_class[c].empty()) continue;
    const std::string who = "rank " + std::to_string(ranks_of_class[c][0]);
    auto near = tensors.begin();
    for (const LoadTarget& target : classes.targets[c])
      CKPTDB_RETURN_IF_ERROR(CheckTarget(tensors, target, who, &near));
  }
  const int mine = classes.class_of_rank[rank];
  const auto my_keys = TargetsByKey(classes.targets[mine]);
  const auto owners = OwnersOfKeys(classes, ranks_of_class, my_keys.keys);
  RankReads reads{classes, ranks_of_class, rank, mine};
  // The tensors in key order, as my_keys and owners are, with where each
  // one's bytes begin (as TensorBases): one merge, no lookups.
  auto tensor = tensors.begin();
  uint64_t base = 0;
  StoredTensor stored;  // reused from tensor to tensor
  for (size_t k = 0; k < my_keys.keys.size(); ++k) {
    const std::string_view key = my_keys.keys[k];
    while (tensor != tensors.end() && std::string_view(tensor->first) < key) {
      base += TensorBytes(tensor->second);
      ++tensor;
    }
    if (tensor == tensors.end() || tensor->first != key ||
        owners.Of(k).empty()) {
      return Status::Internal("load planning lost tensor '" + std::string(key) +
                              "'");  // checked above
    }
    stored.Reset(tensor->second, base);
    reads.PlanTensor(tensor->first, stored, my_keys.Of(k), owners.Of(k));
  }
  return std::move(reads.plan);
}

std::vector<const TensorMetadata*> TensorsOfReads(
    const LoadPlan& plan,
    const std::map<std::string, TensorMetadata>& tensors) {
  std::vector<const TensorMetadata*> out;
  out.reserve(plan.reads.size());
  // Reads come in key order, as the map's, and view its keys: each tensor is
  // the previous read's, or the next one when the load takes consecutive
  // tensors, known by where its key lies.
  auto near = tensors.begin();
  for (const ChunkRead& read : plan.reads) {
    const char* key = read.flat_key.data();
    if (near != tensors.end() && near->first.data() != key &&
        ++near != tensors.end() && near->first.data() != key) {
      near = tensors.find(std::string(read.flat_key));
      CKPTDB_ASSERT(near != tensors.end());
    }
    out.push_back(&near->second);
  }
  return out;
}

LoadPlan RestrictToRank(const LoadPlan& global, int rank,
                        const std::function<bool(int, size_t)>& on_device) {
  LoadPlan out;
  size_t begin = 0;
  for (size_t read = 0; read < global.reads.size(); ++read) {
    size_t end = begin;
    while (end < global.items.size() && global.items[end].read == read) ++end;
    const ChunkRead& r = global.reads[read];
    std::vector<const ReadItem*> device_items;
    bool receives = false;
    for (size_t i = begin; i < end; ++i) {
      const ReadItem& item = global.items[i];
      if (item.dest_rank != rank) continue;
      receives = true;
      if (on_device && on_device(rank, item.target))
        device_items.push_back(&item);
    }
    if (r.reader_rank == rank || receives) {
      const size_t index = out.reads.size();
      out.reads.push_back(r);
      for (size_t i = begin; i < end; ++i) {
        const ReadItem& item = global.items[i];
        const bool co_receiver =
            on_device && on_device(item.dest_rank, item.target) &&
            std::any_of(
                device_items.begin(), device_items.end(),
                [&](const ReadItem* mine) { return mine->box == item.box; });
        if (r.reader_rank == rank || item.dest_rank == rank || co_receiver) {
          out.items.push_back(item);
          out.items.back().read = index;
        }
      }
    }
    begin = end;
  }
  return out;
}

}  // namespace ckptdb::planner
