// The local reads of a DB: Read (a whole tensor or part of one), Verify and
// CheckStore.
#include <algorithm>
#include <mutex>
#include <new>
#include <set>

#include "engine/api/db_impl.h"
#include "engine/copy/box_copy.h"
#include "engine/parallel.h"
#include "planner/layout_problems.h"
#include "planner/read_plan.h"

namespace ckptdb {

Status DB::Verify(const CheckpointSelector& which) {
  CKPTDB_ASSIGN_OR_RETURN(VerifyReport report, Verify(which, VerifyOptions()));
  if (report.ok()) return Status::OK();
  std::string damaged;
  for (const std::string& problem : report.problems) {
    damaged += (damaged.empty() ? "" : "; ") + problem;
  }
  return Status::Corruption(
      "checkpoint id " + std::to_string(report.checkpoint_id) + ": " +
      std::to_string(report.damaged_chunks) + " of " +
      std::to_string(report.chunks) + " chunks damaged: " + damaged);
}

Result<Tensor> DB::Read(const std::string& flat_key,
                        const CheckpointSelector& which, const Box& box,
                        ReadStats* stats) {
  // An index counts negative positions from the end; a box has none. Its
  // ends must be numbers too (an offset plus an extent beyond 2^63 wrapped).
  bool bad = box.origin.size() != box.shape.size();
  for (size_t d = 0; d < box.origin.size() && !bad; ++d) {
    int64_t end = 0;
    bad = box.origin[d] < 0 || box.shape[d] < 0 ||
          __builtin_add_overflow(box.origin[d], box.shape[d], &end);
  }
  if (bad) {
    return Status::InvalidArgument(
        "box offset " + ShapeToString(box.origin) + " shape " +
        ShapeToString(box.shape) + " of tensor '" + flat_key +
        "': offsets and extents must be >= 0, one of each per dimension, "
        "and their sums below 2^63");
  }
  return Read(flat_key, which, IndexOfBox(box), stats);
}

namespace engine {
namespace {

// The stored tensor `flat_key` of `meta`, or NotFound / InvalidArgument (a
// small value) naming it.
Result<const TensorMetadata*> FindTensor(const CheckpointMetadata& meta,
                                         const std::string& flat_key) {
  auto it = meta.tensors.find(flat_key);
  if (it != meta.tensors.end()) return &it->second;
  const std::string where = " of checkpoint id " + std::to_string(meta.info.id);
  if (meta.values.count(flat_key)) {
    return Status::InvalidArgument("key '" + flat_key + "'" + where +
                                   " is a small value, not a tensor");
  }
  return Status::NotFound("no tensor '" + flat_key + "' in checkpoint id " +
                          std::to_string(meta.info.id));
}

Result<std::vector<std::byte>> Allocate(size_t nbytes,
                                        const std::string& flat_key) {
  try {
    return std::vector<std::byte>(nbytes);
  } catch (const std::bad_alloc&) {
    return Status::Internal("cannot allocate " + std::to_string(nbytes) +
                            " bytes for tensor '" + flat_key + "'");
  }
}

}  // namespace

Result<Tensor> DBImpl::Read(const std::string& flat_key,
                            const CheckpointSelector& which,
                            const TensorIndex& index, ReadStats* stats) {
  std::shared_lock local(open_mu_);
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  CKPTDB_RETURN_IF_ERROR(store_->Refresh());
  CKPTDB_ASSIGN_OR_RETURN(int64_t id, store_->Resolve(which));
  // This tensor alone, from the main record decoded once for reads of its
  // checkpoint.
  CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata meta,
                          store_->GetTensorMetadata(id, flat_key));
  CKPTDB_ASSIGN_OR_RETURN(const TensorMetadata* tensor,
                          FindTensor(meta, flat_key));
  CKPTDB_ASSIGN_OR_RETURN(planner::BoxReadPlan plan,
                          planner::PlanBoxRead(flat_key, *tensor, index));
  Tensor out;
  out.dtype = tensor->dtype;
  out.shape = plan.result_shape;
  CKPTDB_ASSIGN_OR_RETURN(
      out.data,
      Allocate(static_cast<size_t>(plan.box.volume()) * DTypeSize(out.dtype),
               flat_key));
  CKPTDB_RETURN_IF_ERROR(
      ParallelFor(plan.parts.size(), io_threads(), [&](size_t p) -> Status {
        const planner::ChunkPart& part = plan.parts[p];
        const ChunkMetadata& chunk = tensor->chunks[part.chunk];
        CKPTDB_ASSIGN_OR_RETURN(storage::ChunkBuffer buffer,
                                store_->ReadChunk(id, flat_key, chunk));
        Shape in_chunk(part.common.ndim()), in_out(part.common.ndim());
        for (size_t d = 0; d < part.common.ndim(); ++d) {
          in_chunk[d] = part.common.origin[d] - chunk.box.origin[d];
          in_out[d] = part.common.origin[d] - plan.box.origin[d];
        }
        CopyBox({buffer.bytes().data(), chunk.box.shape, in_chunk},
                tensor->dtype, {out.data.data(), plan.box.shape, in_out},
                tensor->dtype, part.common.shape);
        return Status::OK();
      }));
  if (stats != nullptr) {
    *stats = {};
    for (const planner::ChunkPart& part : plan.parts) {
      stats->bytes_read += tensor->chunks[part.chunk].nbytes;
      ++stats->chunks_read;
    }
  }
  return out;
}

Result<VerifyReport> DBImpl::Verify(const CheckpointSelector& which,
                                    const VerifyOptions& options) {
  std::shared_lock local(open_mu_);
  CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata meta, ResolveLocal(which));
  VerifyReport report;
  report.checkpoint_id = meta.info.id;
  std::vector<std::pair<const std::string*, const ChunkMetadata*>> chunks;
  for (const auto& [key, tensor] : meta.tensors) {
    for (std::string& p : planner::LayoutProblems(key, tensor)) {
      report.problems.push_back(std::move(p));
    }
    for (const auto& chunk : tensor.chunks) {
      chunks.emplace_back(&key, &chunk);
      report.bytes += chunk.nbytes;
    }
  }
  report.chunks = chunks.size();
  std::vector<Status> results(chunks.size());
  std::vector<std::string> through_copy(chunks.size());
  std::mutex progress_mu;
  uint64_t done = 0;
  CKPTDB_RETURN_IF_ERROR(
      ParallelFor(chunks.size(), io_threads(), [&](size_t i) -> Status {
        results[i] = store_->VerifyChunk(meta.info.id, *chunks[i].first,
                                         *chunks[i].second, &through_copy[i]);
        if (options.on_progress) {
          std::lock_guard lock(progress_mu);
          done += chunks[i].second->nbytes;
          options.on_progress(done, report.bytes);
        }
        return Status::OK();
      }));
  // A checkpoint deleted while it was verified (by a writer's retention) is
  // gone, not damaged: NotFound, as a load or read of it raises.
  for (const Status& s : results) {
    if (s.IsNotFound()) return s;
  }
  std::set<std::string> lost;
  for (size_t i = 0; i < results.size(); ++i) {
    const Status& s = results[i];
    if (s.ok() && through_copy[i].empty()) continue;
    report.problems.push_back(s.ok() ? through_copy[i] : s.message());
    ++report.damaged_chunks;
    if (s.ok())
      ++report.chunks_read_through_copies;
    else
      lost.insert(*chunks[i].first);
  }
  report.lost_tensors.assign(lost.begin(), lost.end());
  return report;
}

Result<StoreCheckReport> DBImpl::CheckStore() {
  std::shared_lock local(open_mu_);
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  CKPTDB_RETURN_IF_ERROR(store_->Refresh());
  CKPTDB_ASSIGN_OR_RETURN(storage::StoreReport found, store_->Check());
  StoreCheckReport report;
  for (int64_t id : found.unaccounted_chunk_ids) {
    // Above the high-water mark no checkpoint ever committed.
    (id > found.high_water ? report.unfinished_save_ids
                           : report.unaccounted_chunk_ids)
        .push_back(id);
  }
  // Value files no table file reaches: leftovers of a save or a delete that
  // was cut short, which the next read-write open (or save) removes.
  for (int64_t id : found.unused_value_ids) {
    if (std::find(report.unfinished_save_ids.begin(),
                  report.unfinished_save_ids.end(),
                  id) == report.unfinished_save_ids.end())
      report.unfinished_save_ids.push_back(id);
  }
  std::sort(report.unfinished_save_ids.begin(),
            report.unfinished_save_ids.end());
  report.stray_value_files = std::move(found.stray_value_files);
  report.damaged_journal_copies = std::move(found.damaged_journal_copies);
  report.repairable_metadata = std::move(found.repairable_metadata);
  report.lost_metadata = std::move(found.lost_metadata);
  report.damaged_chunk_tables = std::move(found.damaged_chunk_tables);
  report.foreign_entries = std::move(found.foreign_entries);
  report.writer_active = found.writer_active;
  return report;
}

}  // namespace engine
}  // namespace ckptdb
