// DB::Load: target layouts all-gathered, one read plan on every rank, each
// needed chunk read once by its reader, slices copied into local targets or
// sent to the ranks that need them.
#include <map>

#include "engine/src/box_copy.h"
#include "engine/src/db_impl.h"
#include "engine/src/parallel.h"
#include "engine/src/tensor_checks.h"
#include "engine/src/wire.h"
#include "planner/flatten.h"
#include "planner/load_plan.h"

namespace ckptdb::engine {
namespace {

struct LocalTargets {
  std::vector<planner::LoadTarget> targets;
  std::vector<TensorView*> views;  // parallel to targets
  std::vector<std::pair<Value*, const Value*>>
      values;  // (leaf, stored value) to assign
};

// Matches this rank's leaves against the checkpoint: checks dtypes and shapes,
// lists missing and unexpected keys.
Status MatchLeaves(StateDict& state, const CheckpointMetadata& meta,
                   const LoadOptions& options, LocalTargets* out,
                   LoadResult* result) {
  ASSIGN_OR_RETURN(auto leaves, planner::FlattenMutable(state));
  std::map<std::string, bool> requested;
  const std::string where = "checkpoint id " + std::to_string(meta.info.id);
  for (auto& leaf : leaves) {
    requested[leaf.flat_key] = true;
    auto tensor = meta.tensors.find(leaf.flat_key);
    auto value = meta.values.find(leaf.flat_key);
    if (tensor == meta.tensors.end() && value == meta.values.end()) {
      if (options.strict) {
        return Status::NotFound("key '" + leaf.flat_key + "' is not in " +
                                where +
                                " (pass strict=false to skip missing keys)");
      }
      result->missing_keys.push_back(leaf.flat_key);
      continue;
    }
    if (leaf.value) {
      if (value == meta.values.end()) {
        return Status::InvalidArgument("key '" + leaf.flat_key +
                                       "' is a tensor in " + where +
                                       " but a small value in the state dict");
      }
      out->values.emplace_back(leaf.value, &value->second);
      continue;
    }
    TensorView& view = *leaf.tensor;
    if (tensor == meta.tensors.end()) {
      return Status::InvalidArgument(
          "key '" + leaf.flat_key + "' is a small value (" +
          std::string(ValueTypeName(value->second)) + ") in " + where +
          " but a tensor in the state dict");
    }
    RETURN_IF_ERROR(CheckView(leaf.flat_key, view));
    const TensorMetadata& stored = tensor->second;
    if (view.global_shape != stored.global_shape) {
      return Status::InvalidArgument(
          "tensor '" + leaf.flat_key + "': target global shape " +
          ShapeToString(view.global_shape) + " differs from stored " +
          ShapeToString(stored.global_shape));
    }
    if (view.dtype != stored.dtype) {
      if (!options.cast) {
        return Status::InvalidArgument(
            "tensor '" + leaf.flat_key + "': target dtype " +
            std::string(DTypeName(view.dtype)) + " differs from stored " +
            std::string(DTypeName(stored.dtype)) +
            " (pass cast=true to convert)");
      }
      if (!IsNumeric(view.dtype) || !IsNumeric(stored.dtype)) {
        return Status::InvalidArgument(
            "tensor '" + leaf.flat_key + "': cannot cast stored " +
            std::string(DTypeName(stored.dtype)) + " to " +
            std::string(DTypeName(view.dtype)) +
            " (only numeric dtypes convert)");
      }
    }
    out->targets.push_back(
        {leaf.flat_key, {view.global_offset, view.local_shape}});
    out->views.push_back(&view);
  }
  for (const auto& [key, _] : meta.flat_mapping) {
    if (!requested.count(key)) result->unexpected_keys.push_back(key);
  }
  return Status::OK();
}

}  // namespace

Result<LoadResult> DBImpl::Load(StateDict& state,
                                const CheckpointSelector& which,
                                const LoadOptions& options) {
  RETURN_IF_ERROR(CheckOpen());
  const int rank = comm_->rank();
  const int world = comm_->size();
  ASSIGN_OR_RETURN(CheckpointMetadata meta, ResolveCollective(which));

  LoadResult result;
  LocalTargets local;
  Status matched = MatchLeaves(state, meta, options, &local, &result);
  ASSIGN_OR_RETURN(auto gathered,
                   comm_->AllGather(EncodeTargets(matched, local.targets)));
  std::vector<std::vector<planner::LoadTarget>> targets(world);
  std::vector<Status> statuses(world);
  for (int r = 0; r < world; ++r) {
    RETURN_IF_ERROR(DecodeTargets(gathered[r], &statuses[r], &targets[r]));
  }
  RETURN_IF_ERROR(FirstError(statuses));
  ASSIGN_OR_RETURN(planner::LoadPlan plan,
                   planner::BuildLoadPlan(meta.tensors, targets));

  // Items of read i are plan.items[first_item[i], first_item[i + 1]).
  std::vector<size_t> first_item(plan.reads.size() + 1, plan.items.size());
  for (size_t i = plan.items.size(); i-- > 0;)
    first_item[plan.items[i].read] = i;
  for (size_t r = plan.reads.size(); r-- > 0;)
    first_item[r] = std::min(first_item[r], first_item[r + 1]);

  // Buffers for slices that cross ranks: packed contiguously in the stored
  // dtype.
  std::map<size_t, std::vector<char>> outgoing, incoming;  // by item index
  std::vector<size_t> my_reads;
  for (size_t i = 0; i < plan.reads.size(); ++i) {
    if (plan.reads[i].reader_rank == rank) my_reads.push_back(i);
  }
  auto dtype_of = [&](size_t read) {
    return meta.tensors.at(plan.reads[read].flat_key).dtype;
  };
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const auto& item = plan.items[i];
    const int reader = plan.reads[item.read].reader_rank;
    const size_t bytes = item.num_elements() * DTypeSize(dtype_of(item.read));
    if (item.dest_rank == rank) result.stats.bytes_needed += bytes;
    if (reader == rank && item.dest_rank != rank) {
      outgoing[i].resize(bytes);
      result.stats.bytes_sent += bytes;
    }
    if (reader != rank && item.dest_rank == rank) incoming[i].resize(bytes);
  }

  const Shape kNoOffset;
  Status executed =
      ParallelFor(my_reads.size(), io_threads(), [&](size_t k) -> Status {
        const planner::ChunkRead& read = plan.reads[my_reads[k]];
        const TensorMetadata& tensor = meta.tensors.at(read.flat_key);
        const ChunkMetadata& chunk = tensor.chunks[read.chunk];
        ASSIGN_OR_RETURN(storage::ChunkBuffer buffer,
                         store_->ReadChunk(meta.info.id, read.flat_key, chunk));
        for (size_t i = first_item[my_reads[k]];
             i < first_item[my_reads[k] + 1]; ++i) {
          const planner::ReadItem& item = plan.items[i];
          const StridedBox src{buffer.bytes().data(), chunk.local_shape,
                               item.storage_offset};
          if (item.dest_rank == rank) {
            TensorView& view = *local.views[item.target];
            CopyBox(src, tensor.dtype,
                    {view.data, view.local_shape, item.dest_offset}, view.dtype,
                    item.lengths);
          } else {
            const Shape zero(item.lengths.size(), 0);
            CopyBox(src, tensor.dtype,
                    {outgoing.at(i).data(), item.lengths, zero}, tensor.dtype,
                    item.lengths);
          }
        }
        return Status::OK();
      });
  for (size_t read : my_reads)
    result.stats.bytes_read += plan.reads[read].nbytes;
  result.stats.chunks_read = my_reads.size();

  // Slices for other ranks: one exchange, matched in item order per pair of
  // ranks.
  if (world > 1) {
    std::vector<SendBuffer> sends;
    std::vector<RecvBuffer> recvs;
    if (executed.ok()) {
      for (auto& [i, buf] : outgoing)
        sends.push_back({plan.items[i].dest_rank, buf.data(), buf.size()});
      for (auto& [i, buf] : incoming) {
        recvs.push_back({plan.reads[plan.items[i].read].reader_rank, buf.data(),
                         buf.size()});
      }
    }
    // Agree before exchanging, so that no rank waits for slices a failed reader
    // never sends.
    RETURN_IF_ERROR(AgreeOnStatus(executed));
    RETURN_IF_ERROR(comm_->Exchange(sends, recvs));
    for (auto& [i, buf] : incoming) {
      const planner::ReadItem& item = plan.items[i];
      TensorView& view = *local.views[item.target];
      const Shape zero(item.lengths.size(), 0);
      CopyBox({buf.data(), item.lengths, zero}, dtype_of(item.read),
              {view.data, view.local_shape, item.dest_offset}, view.dtype,
              item.lengths);
    }
  } else {
    RETURN_IF_ERROR(executed);
  }
  for (auto& [leaf, stored] : local.values) *leaf = *stored;
  return result;
}

}  // namespace ckptdb::engine
