#include "planner/save_plan.h"

#include <algorithm>
#include <sstream>

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

Status CheckInside(const SaveShard& s, int rank) {
  const size_t ndim = s.global_shape.size();
  if (s.box.offset.size() != ndim || s.box.shape.size() != ndim) {
    return Status::InvalidArgument("tensor '" + s.flat_key + "' on rank " +
                                   std::to_string(rank) + ": shard " +
                                   BoxToString(s.box) + " does not match the " +
                                   std::to_string(ndim) + "-d global shape " +
                                   ShapeToString(s.global_shape));
  }
  for (size_t d = 0; d < ndim; ++d) {
    if (s.global_shape[d] < 0 || s.box.offset[d] < 0 || s.box.shape[d] < 0 ||
        s.box.exclusive_max(d) > s.global_shape[d]) {
      return Status::InvalidArgument(
          "tensor '" + s.flat_key + "': shard on " + RankBox(rank, s.box) +
          " lies outside the global shape " + ShapeToString(s.global_shape));
    }
  }
  return Status::OK();
}

// Checks that distinct boxes are pairwise disjoint: a sweep along the dimension
// where their begins differ most (rows for row shards, columns for column
// shards), comparing each box only with those still open at its begin.
Status CheckDisjoint(const std::string& key, const std::vector<Box>& boxes,
                     const std::vector<int>& first_rank) {
  if (boxes.empty() || boxes[0].ndim() == 0) return Status::OK();
  size_t dim = 0, most = 0;
  for (size_t d = 0; d < boxes[0].ndim(); ++d) {
    std::vector<int64_t> begins;
    for (const Box& b : boxes) begins.push_back(b.offset[d]);
    std::sort(begins.begin(), begins.end());
    const size_t distinct =
        std::unique(begins.begin(), begins.end()) - begins.begin();
    if (distinct > most) {
      most = distinct;
      dim = d;
    }
  }
  std::vector<size_t> order(boxes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return boxes[a].offset[dim] < boxes[b].offset[dim];
  });
  std::vector<size_t> active;
  for (size_t i : order) {
    const int64_t begin = boxes[i].offset[dim];
    std::erase_if(
        active, [&](size_t j) { return boxes[j].exclusive_max(dim) <= begin; });
    for (size_t j : active) {
      if (auto common = Intersect(boxes[j], boxes[i])) {
        const size_t a = std::min(i, j), b = std::max(i, j);
        return Status::InvalidArgument(
            "tensor '" + key + "': shards on " +
            RankBox(first_rank[a], boxes[a]) + " and " +
            RankBox(first_rank[b], boxes[b]) + " overlap in " +
            BoxToString(*common) + " but are not identical replicas");
      }
    }
    active.push_back(i);
  }
  return Status::OK();
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

  // Group shards by key; merge values and the flat mapping.
  std::map<std::string, std::vector<ShardRef>> by_key;
  std::map<std::string, int> value_rank;
  auto add_path = [&](const std::string& key, const Path& path,
                      int rank) -> Status {
    auto [it, inserted] = plan.flat_mapping.emplace(key, path);
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
      RETURN_IF_ERROR(CheckInside(s, r));
      RETURN_IF_ERROR(add_path(s.flat_key, s.path, r));
      by_key[s.flat_key].push_back({&s, {r, i}});
    }
    for (const SaveValue& v : ranks[r].values) {
      RETURN_IF_ERROR(add_path(v.flat_key, v.path, r));
      if (plan.values.emplace(v.flat_key, v.value).second)
        value_rank[v.flat_key] = r;
    }
  }
  for (const auto& [key, rank] : value_rank) {
    if (by_key.count(key)) {
      return Status::InvalidArgument(
          "key '" + key + "' is a small value on rank " + std::to_string(rank) +
          " and a tensor on rank " +
          std::to_string(by_key[key].front().holder.rank));
    }
  }

  // Per tensor: check agreement, group replicas, check disjointness and
  // coverage.
  struct Distinct {
    Box box;
    std::vector<Holder> holders;
  };
  struct Pending {
    size_t tensor;
    uint64_t nbytes;
    Distinct distinct;
  };
  std::vector<Pending> pending;
  for (auto& [key, refs] : by_key) {
    const SaveShard& first = *refs.front().shard;
    const int first_rank = refs.front().holder.rank;
    for (const ShardRef& ref : refs) {
      if (ref.shard->dtype != first.dtype ||
          ref.shard->global_shape != first.global_shape) {
        return Status::InvalidArgument(
            "tensor '" + key + "': rank " + std::to_string(first_rank) +
            " has " + std::string(DTypeName(first.dtype)) + " " +
            ShapeToString(first.global_shape) + " but rank " +
            std::to_string(ref.holder.rank) + " has " +
            std::string(DTypeName(ref.shard->dtype)) + " " +
            ShapeToString(ref.shard->global_shape));
      }
    }
    std::stable_sort(refs.begin(), refs.end(),
                     [](const ShardRef& a, const ShardRef& b) {
                       return a.shard->box < b.shard->box;
                     });
    std::vector<Distinct> distinct;
    for (const ShardRef& ref : refs) {
      if (ref.shard->box.volume() == 0) continue;
      if (distinct.empty() || distinct.back().box != ref.shard->box) {
        distinct.push_back({ref.shard->box, {}});
      }
      distinct.back().holders.push_back(ref.holder);
    }
    std::vector<Box> boxes;
    std::vector<int> first_ranks;
    int64_t covered = 0;
    for (const auto& d : distinct) {
      boxes.push_back(d.box);
      first_ranks.push_back(d.holders.front().rank);
      covered += d.box.volume();
    }
    RETURN_IF_ERROR(CheckDisjoint(key, boxes, first_ranks));
    const int64_t total = NumElements(first.global_shape);
    if (covered != total) {
      return Status::InvalidArgument(
          "tensor '" + key + "' " + ShapeToString(first.global_shape) +
          ": the shards of all ranks cover " + std::to_string(covered) +
          " of " + std::to_string(total) +
          " elements (a gap: no rank holds the rest)");
    }
    plan.tensors.push_back({key, first.dtype, first.global_shape, {}});
    const uint64_t elem = DTypeSize(first.dtype);
    for (auto& d : distinct) {
      const uint64_t nbytes = static_cast<uint64_t>(d.box.volume()) * elem;
      pending.push_back({plan.tensors.size() - 1, nbytes, std::move(d)});
    }
  }

  // Writers: largest boxes first, each to the holder with the fewest bytes so
  // far (then lowest rank). Deterministic: the order depends only on the input.
  std::stable_sort(
      pending.begin(), pending.end(),
      [](const Pending& a, const Pending& b) { return a.nbytes > b.nbytes; });
  for (Pending& p : pending) {
    PlannedTensor& tensor = plan.tensors[p.tensor];
    const size_t elem = DTypeSize(tensor.dtype);
    const uint64_t nbytes = p.nbytes;
    const Holder* best = &p.distinct.holders.front();
    for (const Holder& h : p.distinct.holders) {
      if (plan.bytes_per_rank[h.rank] < plan.bytes_per_rank[best->rank])
        best = &h;
    }
    plan.bytes_per_rank[best->rank] += nbytes;
    plan.total_bytes += nbytes;
    for (Box& piece : SplitBox(p.distinct.box, elem, max_chunk_bytes)) {
      const uint64_t piece_bytes = static_cast<uint64_t>(piece.volume()) * elem;
      tensor.chunks.push_back(
          {std::move(piece), best->rank, best->shard, piece_bytes});
    }
  }
  for (PlannedTensor& t : plan.tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const PlannedChunk& a, const PlannedChunk& b) {
                return a.box < b.box;
              });
  }
  return plan;
}

}  // namespace ckptdb::planner
