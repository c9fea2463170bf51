#include "planner/load_plan.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace ckptdb::planner {
namespace {

// Chunks of one tensor sorted by their begin in dimension 0, with a running
// maximum of their end in dimension 0: a static index answering "which chunks
// meet this box".
class ChunkIndex {
 public:
  explicit ChunkIndex(const TensorMetadata& tensor) : tensor_(tensor) {
    order_.resize(tensor.chunks.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    if (Ndim() == 0) return;
    std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      return Begin(a) != Begin(b) ? Begin(a) < Begin(b) : a < b;
    });
    max_end_.resize(order_.size());
    int64_t running = INT64_MIN;
    for (size_t i = 0; i < order_.size(); ++i) {
      running = std::max(running, End(order_[i]));
      max_end_[i] = running;
    }
  }

  // Calls fn(chunk index, intersection) for every chunk meeting `box`, in
  // ascending chunk order.
  template <typename Fn>
  void ForEachOverlap(const Box& box, Fn&& fn) const {
    std::vector<std::pair<size_t, Box>> hits;
    if (Ndim() == 0) {
      for (size_t c : order_) hits.emplace_back(c, Box{});
    } else {
      const int64_t begin = box.offset[0], end = box.exclusive_max(0);
      // Candidates start before `end`; scan back while an earlier chunk may
      // still reach `begin`.
      size_t hi =
          std::partition_point(order_.begin(), order_.end(),
                               [&](size_t c) { return Begin(c) < end; }) -
          order_.begin();
      for (size_t i = hi; i-- > 0;) {
        if (max_end_[i] <= begin) break;
        const size_t c = order_[i];
        Box chunk{tensor_.chunks[c].global_offset,
                  tensor_.chunks[c].local_shape};
        if (auto common = Intersect(chunk, box))
          hits.emplace_back(c, std::move(*common));
      }
      std::sort(hits.begin(), hits.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    for (auto& [c, common] : hits) fn(c, common);
  }

 private:
  size_t Ndim() const { return tensor_.global_shape.size(); }
  int64_t Begin(size_t c) const { return tensor_.chunks[c].global_offset[0]; }
  int64_t End(size_t c) const {
    return tensor_.chunks[c].global_offset[0] +
           tensor_.chunks[c].local_shape[0];
  }

  const TensorMetadata& tensor_;
  std::vector<size_t> order_;
  std::vector<int64_t> max_end_;
};

Shape Sub(const Shape& a, const Shape& b) {
  Shape out(a.size());
  for (size_t d = 0; d < a.size(); ++d) out[d] = a[d] - b[d];
  return out;
}

}  // namespace

std::string LoadPlan::ToString() const {
  std::ostringstream out;
  for (size_t r = 0; r < reads.size(); ++r) {
    out << "read " << r << ": " << reads[r].flat_key << " chunk "
        << reads[r].chunk << " by rank " << reads[r].reader_rank << " ("
        << reads[r].nbytes << " bytes)\n";
  }
  for (const auto& item : items) {
    out << "  item read " << item.read << " -> rank " << item.dest_rank
        << " target " << item.target << " src "
        << ShapeToString(item.storage_offset) << " dst "
        << ShapeToString(item.dest_offset) << " len "
        << ShapeToString(item.lengths) << "\n";
  }
  return out.str();
}

Result<LoadPlan> BuildLoadPlan(
    const std::map<std::string, TensorMetadata>& tensors,
    const std::vector<std::vector<LoadTarget>>& targets) {
  LoadPlan plan;
  const int num_ranks = static_cast<int>(targets.size());
  plan.read_bytes_per_rank.assign(num_ranks, 0);

  struct Need {
    int dest_rank;
    size_t target;
    Box common;
  };
  struct ChunkNeeds {
    std::vector<Need> needs;
    int reader = -1;
  };
  // (flat key, chunk) -> the boxes of it that targets need, and its reader.
  std::map<std::pair<std::string, size_t>, ChunkNeeds> by_chunk;
  std::map<std::string, ChunkIndex> indexes;
  for (int r = 0; r < num_ranks; ++r) {
    for (size_t t = 0; t < targets[r].size(); ++t) {
      const LoadTarget& target = targets[r][t];
      auto it = tensors.find(target.flat_key);
      if (it == tensors.end()) {
        return Status::InvalidArgument("load target '" + target.flat_key +
                                       "' on rank " + std::to_string(r) +
                                       " is not a tensor of the checkpoint");
      }
      const TensorMetadata& tensor = it->second;
      const Box whole{Shape(tensor.global_shape.size(), 0),
                      tensor.global_shape};
      if (target.box.ndim() != whole.ndim() ||
          target.box.offset.size() != whole.ndim() ||
          !Contains(whole, target.box) ||
          std::any_of(target.box.shape.begin(), target.box.shape.end(),
                      [](int64_t n) { return n < 0; })) {
        return Status::InvalidArgument("load target '" + target.flat_key +
                                       "' on rank " + std::to_string(r) + ": " +
                                       BoxToString(target.box) +
                                       " lies outside the stored shape " +
                                       ShapeToString(tensor.global_shape));
      }
      if (target.box.volume() == 0) continue;
      auto [index, _] = indexes.try_emplace(target.flat_key, tensor);
      index->second.ForEachOverlap(
          target.box, [&](size_t chunk, const Box& common) {
            by_chunk[{target.flat_key, chunk}].needs.push_back({r, t, common});
          });
    }
  }

  // Readers: largest chunks first, each to the needing rank with the fewest
  // bytes so far.
  struct Order {
    ChunkNeeds* chunk;
    uint64_t nbytes;
  };
  std::vector<Order> order;
  order.reserve(by_chunk.size());
  for (auto& [key, chunk] : by_chunk) {
    order.push_back({&chunk, tensors.at(key.first).chunks[key.second].nbytes});
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const Order& a, const Order& b) { return a.nbytes > b.nbytes; });
  for (const Order& o : order) {
    int best = o.chunk->needs.front().dest_rank;
    for (const Need& n : o.chunk->needs) {
      if (plan.read_bytes_per_rank[n.dest_rank] <
          plan.read_bytes_per_rank[best]) {
        best = n.dest_rank;
      }
    }
    plan.read_bytes_per_rank[best] += o.nbytes;
    o.chunk->reader = best;
  }

  // Emit reads in (key, chunk) order and their items.
  for (const auto& [key, chunk_needs] : by_chunk) {
    const auto& chunk = tensors.at(key.first).chunks[key.second];
    const size_t read_index = plan.reads.size();
    plan.reads.push_back(
        {key.first, key.second, chunk_needs.reader, chunk.nbytes});
    for (const Need& n : chunk_needs.needs) {
      const Shape& target_offset = targets[n.dest_rank][n.target].box.offset;
      plan.items.push_back({read_index, n.dest_rank, n.target,
                            Sub(n.common.offset, chunk.global_offset),
                            Sub(n.common.offset, target_offset),
                            n.common.shape});
    }
  }
  return plan;
}

}  // namespace ckptdb::planner
