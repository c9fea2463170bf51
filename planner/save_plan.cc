#include "planner/save_plan.h"

#include <algorithm>
#include <queue>
#include <sstream>

#include "planner/partition.h"

namespace ckptdb::planner {
namespace {

struct Holder {
  int rank;
  size_t shard;
};

struct ShardRef {
  const SaveShard* shard;
  Holder holder;
};

std::string RankBox(int rank, const Box& box) {
  return "rank " + std::to_string(rank) + " box " + BoxToString(box);
}

// Grouping of every rank's shards by key; values and the flat mapping go
// straight into `plan`.
Status GroupByKey(const std::vector<RankSaveLayout>& ranks, SavePlan* plan,
                  std::map<std::string, std::vector<ShardRef>>* by_key) {
  std::map<std::string, int> value_rank;
  auto add_path = [&](const std::string& key, const Path& path,
                      int rank) -> Status {
    auto [it, inserted] = plan->flat_mapping.emplace(key, path);
    if (!inserted && it->second != path) {
      return Status::InvalidArgument(
          "flat key '" + key + "' names different paths on rank " +
          std::to_string(rank) + " and another rank");
    }
    return Status::OK();
  };
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (size_t i = 0; i < ranks[r].shards.size(); ++i) {
      const SaveShard& s = ranks[r].shards[i];
      RETURN_IF_ERROR(add_path(s.flat_key, s.path, r));
      (*by_key)[s.flat_key].push_back({&s, {r, i}});
    }
    for (const SaveValue& v : ranks[r].values) {
      RETURN_IF_ERROR(add_path(v.flat_key, v.path, r));
      if (plan->values.emplace(v.flat_key, v.value).second)
        value_rank[v.flat_key] = r;
    }
  }
  for (const auto& [key, rank] : value_rank) {
    auto tensor = by_key->find(key);
    if (tensor != by_key->end()) {
      return Status::InvalidArgument(
          "key '" + key + "' is a small value on rank " + std::to_string(rank) +
          " and a tensor on rank " +
          std::to_string(tensor->second.front().holder.rank));
    }
  }
  return Status::OK();
}

// Checks that every rank gives `key` the same dtype and global shape.
Status CheckAgreement(const std::string& key,
                      const std::vector<ShardRef>& refs) {
  const SaveShard& first = *refs.front().shard;
  for (const ShardRef& ref : refs) {
    if (ref.shard->dtype != first.dtype ||
        ref.shard->global_shape != first.global_shape) {
      return Status::InvalidArgument(
          "tensor '" + key + "': rank " +
          std::to_string(refs.front().holder.rank) + " has " +
          std::string(DTypeName(first.dtype)) + " " +
          ShapeToString(first.global_shape) + " but rank " +
          std::to_string(ref.holder.rank) + " has " +
          std::string(DTypeName(ref.shard->dtype)) + " " +
          ShapeToString(ref.shard->global_shape));
    }
  }
  return Status::OK();
}

Status LayoutError(const std::string& key, const Shape& shape,
                   const std::vector<ShardRef>& refs,
                   const PartitionProblem& p) {
  const std::string tensor = "tensor '" + key + "'";
  const std::string global = ShapeToString(shape);
  auto rank_box = [&](size_t i) {
    return RankBox(refs[i].holder.rank, refs[i].shard->box);
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
          tensor + " on rank " + std::to_string(refs[p.box].holder.rank) +
          ": shard " + BoxToString(refs[p.box].shard->box) +
          " does not match the " + std::to_string(shape.size()) +
          "-d global shape " + global);
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

// Checks that the shards of `key`, replicas counted once, partition it.
Status CheckLayout(const std::string& key, const std::vector<ShardRef>& refs) {
  const Shape& shape = refs.front().shard->global_shape;
  std::vector<const Box*> boxes;
  boxes.reserve(refs.size());
  for (const ShardRef& ref : refs) boxes.push_back(&ref.shard->box);
  const PartitionProblem problem = CheckPartitionOfPointers(
      shape, boxes, {.allow_replicas = true, .allow_empty_boxes = true});
  return LayoutError(key, shape, refs, problem);
}

struct Distinct {
  Box box;
  std::vector<Holder> holders;  // ascending rank
};

struct Pending {
  size_t tensor;
  uint64_t nbytes;
  Distinct distinct;
};

// The distinct non-empty boxes of `refs`, each with the ranks holding it.
std::vector<Distinct> GroupReplicas(std::vector<ShardRef>& refs) {
  std::stable_sort(refs.begin(), refs.end(),
                   [](const ShardRef& a, const ShardRef& b) {
                     return a.shard->box < b.shard->box;
                   });
  std::vector<Distinct> distinct;
  for (const ShardRef& ref : refs) {
    if (ref.shard->box.volume() == 0) continue;
    if (distinct.empty() || distinct.back().box != ref.shard->box)
      distinct.push_back({ref.shard->box, {}});
    distinct.back().holders.push_back(ref.holder);
  }
  return distinct;
}

// Writers: largest boxes first, split into chunks, each chunk to the holder of
// its box with the fewest bytes so far (then the lowest rank), so that the
// replicas of a box share its writing. Deterministic: the order depends only
// on the input.
void AssignWriters(std::vector<Pending>& pending, size_t max_chunk_bytes,
                   SavePlan* plan) {
  std::stable_sort(
      pending.begin(), pending.end(),
      [](const Pending& a, const Pending& b) { return a.nbytes > b.nbytes; });
  for (Pending& p : pending) {
    PlannedTensor& tensor = plan->tensors[p.tensor];
    const size_t elem = DTypeSize(tensor.dtype);
    plan->total_bytes += p.nbytes;
    // The holders by bytes so far (then position, which is rank order): a
    // box's chunks cost O(log holders) each, not O(holders).
    const std::vector<Holder>& holders = p.distinct.holders;
    using Load = std::pair<uint64_t, size_t>;
    std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
    for (size_t i = 0; i < holders.size(); ++i)
      least.push({plan->bytes_per_rank[holders[i].rank], i});
    for (Box& piece : SplitBox(p.distinct.box, elem, max_chunk_bytes)) {
      const uint64_t piece_bytes = static_cast<uint64_t>(piece.volume()) * elem;
      const auto [bytes, i] = least.top();
      least.pop();
      const Holder& best = holders[i];
      plan->bytes_per_rank[best.rank] += piece_bytes;
      least.push({bytes + piece_bytes, i});
      tensor.chunks.push_back(
          {std::move(piece), best.rank, best.shard, piece_bytes});
    }
  }
  for (PlannedTensor& t : plan->tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const PlannedChunk& a, const PlannedChunk& b) {
                return a.box < b.box;
              });
  }
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
  if (max_chunk_bytes == 0)
    return Status::InvalidArgument("max_chunk_bytes must be > 0");
  SavePlan plan;
  plan.bytes_per_rank.assign(ranks.size(), 0);
  std::map<std::string, std::vector<ShardRef>> by_key;
  RETURN_IF_ERROR(GroupByKey(ranks, &plan, &by_key));

  // Per tensor: check agreement and layout, group replicas.
  std::vector<Pending> pending;
  for (auto& [key, refs] : by_key) {
    RETURN_IF_ERROR(CheckAgreement(key, refs));
    RETURN_IF_ERROR(CheckLayout(key, refs));
    const SaveShard& first = *refs.front().shard;
    plan.tensors.push_back({key, first.dtype, first.global_shape, {}});
    const uint64_t elem = DTypeSize(first.dtype);
    for (Distinct& d : GroupReplicas(refs)) {
      const uint64_t nbytes = static_cast<uint64_t>(d.box.volume()) * elem;
      pending.push_back({plan.tensors.size() - 1, nbytes, std::move(d)});
    }
  }
  AssignWriters(pending, max_chunk_bytes, &plan);
  return plan;
}

}  // namespace ckptdb::planner
