#include "planner/incremental.h"

#include <algorithm>

namespace ckptdb::planner {

const ChunkMetadata* CandidateChunk(const PreviousCheckpoint& previous,
                                    const std::string& key, DType dtype,
                                    const Shape& global_shape, const Box& box,
                                    int32_t world) {
  auto tensor = previous.tensors.find(key);
  if (tensor == previous.tensors.end() || tensor->second.dtype != dtype ||
      tensor->second.global_shape != global_shape)
    return nullptr;
  const auto& chunks = tensor->second.chunks;
  // Chunks are sorted by global offset.
  auto at = std::lower_bound(chunks.begin(), chunks.end(), box.offset,
                             [](const ChunkMetadata& c, const Shape& offset) {
                               return c.global_offset < offset;
                             });
  if (at == chunks.end() || at->global_offset != box.offset ||
      at->local_shape != box.shape || !at->content_hash ||
      at->writer_rank >= world)
    return nullptr;
  return &*at;
}

ChunkSource DecideChunkSource(const ChunkMetadata* candidate,
                              int64_t previous_id, const ContentHash& hash) {
  if (candidate == nullptr || candidate->content_hash != hash) return {};
  return {true, candidate->holder_id != 0 ? candidate->holder_id : previous_id,
          candidate->writer_rank, candidate->checksum};
}

}  // namespace ckptdb::planner
