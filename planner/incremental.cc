#include "planner/incremental.h"

#include <algorithm>
#include <sstream>

#include "core/sorted_maps.h"

namespace ckptdb::planner {
namespace {

// Whether `stored`, the chunk of a previous record at the offset of a new
// chunk with box `box`, may hold the same bytes: the same box, a content hash
// recorded, written by a rank of this world.
bool Comparable(const ChunkMetadata& stored, const Box& box, int32_t world) {
  return stored.box == box && stored.content_hash && stored.writer_rank < world;
}

}  // namespace

const ChunkMetadata* CandidateChunk(
    const PreviousCheckpoint& previous, const std::string& key, DType dtype,
    const Shape& global_shape, const Box& box, int32_t world,
    std::map<std::string, TensorMetadata>::const_iterator* near) {
  auto tensor = near != nullptr ? FindNear(previous.tensors, *near, key)
                                : previous.tensors.find(key);
  if (near != nullptr && tensor != previous.tensors.end()) *near = tensor;
  if (tensor == previous.tensors.end() || tensor->second.dtype != dtype ||
      tensor->second.global_shape != global_shape)
    return nullptr;
  const auto& chunks = tensor->second.chunks;
  // Chunks are sorted by global offset.
  auto at = std::lower_bound(chunks.begin(), chunks.end(), box.origin,
                             [](const ChunkMetadata& c, const Shape& offset) {
                               return c.box.origin < offset;
                             });
  if (at == chunks.end() || !Comparable(*at, box, world)) return nullptr;
  return &*at;
}

ChunkSource DecideChunkSource(const ChunkMetadata* candidate,
                              int64_t previous_id, const ContentHash& hash) {
  if (candidate == nullptr || candidate->content_hash != hash) return {};
  return {true, candidate->holder_id != 0 ? candidate->holder_id : previous_id,
          candidate->writer_rank, candidate->checksum};
}

bool HashBeforeWriting(const ChunkMetadata* candidate) {
  return candidate != nullptr && candidate->holder_id != 0;
}

Status CheckReferences(const std::map<std::string, TensorMetadata>& tensors,
                       const PreviousCheckpoint& previous, int32_t world) {
  // Both maps are in key order: one walk through each.
  auto near = previous.tensors.begin();
  for (const auto& [key, tensor] : tensors) {
    // Both chunk lists are sorted by offset: one walk through each (no
    // lookup per chunk; a record can hold millions).
    while (near != previous.tensors.end() && near->first < key) ++near;
    const auto found =
        previous.id != 0 && near != previous.tensors.end() && near->first == key
            ? near
            : previous.tensors.end();
    const bool comparable = found != previous.tensors.end() &&
                            found->second.dtype == tensor.dtype &&
                            found->second.global_shape == tensor.global_shape;
    size_t j = 0;
    for (const ChunkMetadata& chunk : tensor.chunks) {
      if (chunk.holder_id == 0) continue;
      const ChunkMetadata* candidate = nullptr;
      if (comparable && chunk.content_hash) {
        const auto& old = found->second.chunks;
        while (j < old.size() && old[j].box.origin < chunk.box.origin) ++j;
        if (j < old.size() && Comparable(old[j], chunk.box, world))
          candidate = &old[j];
      }
      const ChunkSource want =
          candidate == nullptr
              ? ChunkSource{}
              : DecideChunkSource(candidate, previous.id, *chunk.content_hash);
      if (want ==
          ChunkSource{true, chunk.holder_id, chunk.writer_rank, chunk.checksum})
        continue;
      std::ostringstream what;
      what << "the chunk of '" << key << "' at offset "
           << ShapeToString(chunk.box.origin)
           << " refers to the bytes written by rank " << chunk.writer_rank
           << " in checkpoint id " << chunk.holder_id << ", but checkpoint id "
           << previous.id << ", which it was compared with, "
           << (candidate == nullptr ? "has no equal chunk there"
                                    : "records other bytes for it");
      return Status::Internal(what.str());
    }
  }
  return Status::OK();
}

}  // namespace ckptdb::planner
