#include "engine/save/save_record.h"

#include <chrono>
#include <set>
#include <string>

#include "core/sorted_maps.h"

namespace ckptdb::engine {

ChunkMetadata RecordedChunk(planner::PlannedChunk chunk,
                            const WrittenChunk& w) {
  return {std::move(chunk.box),
          w.holder_id != 0 ? w.writer_rank : chunk.writer_rank,
          chunk.nbytes,
          w.checksum,
          w.holder_id,
          w.content_hash};
}

Result<CheckpointMetadata> CommitRecord(
    planner::SavePlan plan, int64_t id, const SaveOptions& options, int world,
    const std::vector<std::vector<WrittenChunk>>& written_by_rank) {
  CheckpointMetadata meta;
  meta.info.id = id;
  meta.info.step = options.step;
  meta.info.tag = options.tag;
  meta.info.created = std::chrono::duration<double>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  meta.info.world_size = world;
  meta.info.num_tensors = static_cast<int64_t>(plan.tensors.size());
  meta.info.nbytes = static_cast<int64_t>(plan.total_bytes);
  meta.flat_mapping = std::move(plan.flat_mapping);
  meta.path_kinds = std::move(plan.path_kinds);
  meta.values = std::move(plan.values);
  meta.user_metadata = options.user_metadata;
  std::vector<size_t> cursor(world, 0);
  std::set<int64_t> references;
  int64_t written_bytes = 0;
  for (auto& tensor : plan.tensors) {
    // The plan's tensors come in key order: each key moves in at the end.
    TensorMetadata& t = AtOrInsert(meta.tensors, std::move(tensor.flat_key));
    t.dtype = tensor.dtype;
    t.global_shape = tensor.global_shape;
    t.chunks.reserve(tensor.chunks.size());
    for (auto& chunk : tensor.chunks) {
      const auto& written = written_by_rank[chunk.writer_rank];
      size_t& at = cursor[chunk.writer_rank];
      if (at >= written.size()) {
        return Status::Internal("rank " + std::to_string(chunk.writer_rank) +
                                " reported too few chunks");
      }
      const WrittenChunk& w = written[at++];
      if (w.holder_id != 0) {
        references.insert(w.holder_id);
      } else {
        written_bytes += static_cast<int64_t>(chunk.nbytes);
      }
      t.chunks.push_back(RecordedChunk(std::move(chunk), w));
    }
    std::vector<planner::PlannedChunk>().swap(tensor.chunks);
  }
  meta.info.nbytes_written = written_bytes;
  meta.info.references.assign(references.begin(), references.end());
  return meta;
}

}  // namespace ckptdb::engine
