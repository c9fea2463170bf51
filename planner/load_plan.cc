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
  // Per requested tensor, in key order: its chunk index and, per chunk, the
  // boxes of it that targets need and its reader.
  struct TensorNeeds {
    const TensorMetadata* meta;
    ChunkIndex index;
    std::vector<ChunkNeeds> chunks;
    explicit TensorNeeds(const TensorMetadata& m)
        : meta(&m), index(m), chunks(m.chunks.size()) {}
  };
  std::map<std::string_view, TensorNeeds> by_tensor;
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
      auto [entry, _] = by_tensor.try_emplace(it->first, tensor);
      TensorNeeds& needs = entry->second;
      needs.index.ForEachOverlap(
          target.box, [&](size_t chunk, const Box& common) {
            needs.chunks[chunk].needs.push_back({r, t, common});
          });
    }
  }

  // Needed chunks in (key, chunk) order.
  struct Needed {
    const std::string_view* key;
    TensorNeeds* tensor;
    size_t chunk;
    uint64_t nbytes;
  };
  std::vector<Needed> needed;
  for (auto& [key, tensor] : by_tensor) {
    for (size_t c = 0; c < tensor.chunks.size(); ++c) {
      if (!tensor.chunks[c].needs.empty())
        needed.push_back({&key, &tensor, c, tensor.meta->chunks[c].nbytes});
    }
  }

  // Readers: largest chunks first, each to the needing rank with the fewest
  // bytes so far.
  std::vector<uint32_t> order(needed.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return needed[a].nbytes > needed[b].nbytes;
  });
  for (const uint32_t i : order) {
    ChunkNeeds& chunk = needed[i].tensor->chunks[needed[i].chunk];
    int best = chunk.needs.front().dest_rank;
    for (const Need& n : chunk.needs) {
      if (plan.read_bytes_per_rank[n.dest_rank] <
          plan.read_bytes_per_rank[best]) {
        best = n.dest_rank;
      }
    }
    plan.read_bytes_per_rank[best] += needed[i].nbytes;
    chunk.reader = best;
  }

  // Canonical positions: every stored tensor before a needed one counts.
  std::map<std::string_view, uint64_t> tensor_position;
  {
    uint64_t at = 0;
    auto next = by_tensor.begin();
    for (const auto& [key, tensor] : tensors) {
      if (next != by_tensor.end() && next->first == key) {
        tensor_position.emplace(next->first, at);
        ++next;
      }
      at += static_cast<uint64_t>(NumElements(tensor.global_shape)) *
            DTypeSize(tensor.dtype);
    }
  }

  // Emit reads in (key, chunk) order and their items.
  plan.reads.reserve(needed.size());
  const std::string_view* position_key = nullptr;
  uint64_t position = 0;
  size_t position_chunk = 0;
  for (const Needed& n : needed) {
    if (position_key != n.key) {
      position_key = n.key;
      position = tensor_position.at(*n.key);
      position_chunk = 0;
    }
    for (; position_chunk < n.chunk; ++position_chunk)
      position += n.tensor->meta->chunks[position_chunk].nbytes;
    const ChunkNeeds& chunk_needs = n.tensor->chunks[n.chunk];
    const auto& chunk = n.tensor->meta->chunks[n.chunk];
    const size_t read_index = plan.reads.size();
    plan.reads.push_back({std::string(*n.key), n.chunk, chunk_needs.reader,
                          chunk.nbytes, position});
    for (const Need& need : chunk_needs.needs) {
      const Shape& target_offset =
          targets[need.dest_rank][need.target].box.offset;
      plan.items.push_back({read_index, need.dest_rank, need.target,
                            Sub(need.common.offset, chunk.global_offset),
                            Sub(need.common.offset, target_offset),
                            need.common.shape});
    }
  }
  return plan;
}

LoadPlan RestrictToRank(const LoadPlan& global, int rank,
                        const OnDeviceLookup& on_device) {
  LoadPlan out;
  auto device = [&](const ReadItem& item) {
    return on_device && on_device(item.dest_rank, item.target);
  };
  size_t i = 0;
  for (size_t r = 0; r < global.reads.size(); ++r) {
    const size_t begin = i;
    while (i < global.items.size() && global.items[i].read == r) ++i;
    const bool reader = global.reads[r].reader_rank == rank;
    // This rank's device boxes of the read: other receivers come along.
    std::vector<const ReadItem*> boxes;
    for (size_t k = begin; k < i; ++k) {
      const ReadItem& item = global.items[k];
      if (item.dest_rank == rank && device(item)) boxes.push_back(&item);
    }
    const size_t first = out.items.size();
    for (size_t k = begin; k < i; ++k) {
      const ReadItem& item = global.items[k];
      bool keep = reader || item.dest_rank == rank;
      if (!keep && device(item)) {
        keep = std::any_of(boxes.begin(), boxes.end(), [&](const ReadItem* b) {
          return b->storage_offset == item.storage_offset &&
                 b->lengths == item.lengths;
        });
      }
      if (!keep) continue;
      out.items.push_back(item);
      out.items.back().read = out.reads.size();
    }
    if (reader || out.items.size() > first)
      out.reads.push_back(global.reads[r]);
  }
  return out;
}

}  // namespace ckptdb::planner
