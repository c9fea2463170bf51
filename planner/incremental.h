#pragma once

// Incremental saves as plain decisions: which stored chunk a new chunk is
// compared with, and whether it is written or refers to stored bytes.

#include <cstdint>
#include <map>
#include <string>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "core/box_geometry.h"

namespace ckptdb::planner {

// Where a chunk of a save gets its stored bytes.
struct ChunkSource {
  // Refers to bytes already stored (true) or is written (false).
  bool reuse = false;
  // With `reuse`: the checkpoint whose key range holds the bytes, the rank
  // that wrote them there and their checksum.
  int64_t holder_id = 0;
  int32_t writer_rank = 0;
  uint64_t checksum = 0;

  friend bool operator==(const ChunkSource&, const ChunkSource&) = default;
};

// The checkpoint an incremental save compares with (its latest committed
// one): its id and the tensors of the keys the rank writes, with their chunks.
struct PreviousCheckpoint {
  int64_t id = 0;
  std::map<std::string, TensorMetadata> tensors;
};

// The chunk of `previous` a new chunk of tensor `key` (of `dtype`, global
// shape `global_shape`) with box `box` may equal: the same key, dtype, global
// shape and box, with a content hash recorded, written by a rank below
// `world` (a record names only ranks of its own world). nullptr otherwise.
// With `near` (an iterator of previous.tensors), the tensor is sought from
// there, as chunks taken in key order find theirs without a lookup, and
// `*near` becomes where the search ended.
const ChunkMetadata* CandidateChunk(
    const PreviousCheckpoint& previous, const std::string& key, DType dtype,
    const Shape& global_shape, const Box& box, int32_t world,
    std::map<std::string, TensorMetadata>::const_iterator* near = nullptr);

// The decision for a chunk whose bytes hash to `hash`: reuse `candidate`'s
// stored bytes (of checkpoint `previous_id`, or of the checkpoint holding
// them in turn) when the 128-bit hashes are equal; otherwise write it.
ChunkSource DecideChunkSource(const ChunkMetadata* candidate,
                              int64_t previous_id, const ContentHash& hash);

// Whether a chunk with `candidate` (CandidateChunk) is hashed before it is
// written, so that it is not written when unchanged: when the candidate was
// itself found unchanged by the save that recorded it (it refers to older
// bytes), as a frozen or rarely updated tensor is. Otherwise (no candidate, or
// the candidate's bytes were written by that save: the tensor changed then, as
// a trained one does at every step) the chunk is hashed as it is written, one
// pass over its bytes instead of two, and its bytes are taken back if it turns
// out unchanged after all.
bool HashBeforeWriting(const ChunkMetadata* candidate);

// Whether every chunk of `tensors` (a new checkpoint's record, `world`
// ranks) that refers to stored bytes refers to what `previous` (the record it
// was compared with, holding at least the tensors with such chunks) decides
// for it: the same holder, writer rank and checksum as DecideChunkSource gives
// for the chunk's content hash. Rank 0 checks the record before committing
// it, so that no rank's mistake commits a reference to bytes that are not
// there. Internal, naming the key and offset, for the first that does not.
Status CheckReferences(const std::map<std::string, TensorMetadata>& tensors,
                       const PreviousCheckpoint& previous, int32_t world);

}  // namespace ckptdb::planner
