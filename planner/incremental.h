#pragma once

// Incremental saves as plain decisions: which checkpoints and stored chunks a
// new chunk is compared with, and whether it is written or refers to stored
// bytes.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

// The content hashes of a record's chunks, in a table of a few bytes a chunk:
// whether a chunk's hash is among them is one probe into memory that stays in
// the cache, where a lookup in the record walks its maps.
class ContentHashSet {
 public:
  ContentHashSet() = default;
  explicit ContentHashSet(const std::map<std::string, TensorMetadata>& tensors);
  bool Contains(const ContentHash& hash) const;

 private:
  // `hash`'s slot, or the empty one where it would go. REQUIRES: a table.
  size_t Slot(const ContentHash& hash) const;

  // Open addressing on the hash's low bits (content hashes are uniform);
  // {0, 0} marks an empty slot, and a chunk hashing to it sets `zero_`.
  std::vector<ContentHash> slots_;
  bool zero_ = false;
};

// A checkpoint an incremental save compares with (one of the store's newest
// committed ones): its id and the tensors of the keys the rank writes, with
// their chunks; `hashes` indexes their content hashes (IndexHashes).
struct PreviousCheckpoint {
  int64_t id = 0;
  std::map<std::string, TensorMetadata> tensors;
  ContentHashSet hashes{};
};

// Fills previous->hashes from its tensors.
void IndexHashes(PreviousCheckpoint* previous);

// The checkpoints an incremental save compares with, newest first (none for
// a store's first save, or with incremental saves off).
using ComparedCheckpoints = std::vector<const PreviousCheckpoint*>;

// Which checkpoints an incremental save compares with: the newest `depth` of
// `ids` (a store's checkpoints, oldest first), newest first.
std::vector<int64_t> ComparedIds(const std::vector<int64_t>& ids, int depth);

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

// A chunk of a compared checkpoint that a new chunk may equal
// (CandidateChunk), and that checkpoint's id.
struct Candidate {
  const ChunkMetadata* chunk = nullptr;
  int64_t checkpoint_id = 0;
};

// The candidates of new chunks taken in key order, in each of the compared
// checkpoints: each tensor is sought from where the previous chunk's was.
class CandidateFinder {
 public:
  CandidateFinder(const ComparedCheckpoints& compared, int32_t world);

  // CandidateChunk's chunk in each compared checkpoint that has one, newest
  // first; valid until the next call.
  const std::vector<Candidate>& Find(const std::string& key, DType dtype,
                                     const Shape& global_shape, const Box& box);

  // The same decisions for a save's chunks, reading the older checkpoints'
  // records only for a chunk whose hash their ContentHashSet holds (a chunk
  // that changed, as a trained one does at every save, costs one probe of
  // each set). Begin takes the chunk and returns the newest checkpoint's
  // candidate (for HashBeforeWriting); Decide, once its bytes are hashed,
  // DecideChunkSource among all its candidates. Begin's arguments must
  // outlive the Decide that follows (a save's plan holds them).
  const ChunkMetadata* Begin(const std::string& key, DType dtype,
                             const Shape& global_shape, const Box& box);
  ChunkSource Decide(const ContentHash& hash);

 private:
  using Near = std::map<std::string, TensorMetadata>::const_iterator;
  const ComparedCheckpoints& compared_;
  int32_t world_ = 0;
  std::vector<Near> near_;  // one per compared checkpoint
  std::vector<Candidate> found_;
  // Begin's chunk.
  const std::string* key_ = nullptr;
  DType dtype_ = DType::kFloat32;
  const Shape* global_shape_ = nullptr;
  const Box* box_ = nullptr;
  const ChunkMetadata* newest_ = nullptr;
};

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
// ranks) that refers to stored bytes refers to bytes that `compared` (the
// records it was compared with, holding at least the tensors with such
// chunks) record for its content hash: the same holder, writer rank and
// checksum as DecideChunkSource gives for one of its candidates.
// Rank 0 checks the record before committing it, so that no rank's mistake
// commits a reference to bytes that are not there. Internal, naming the key
// and offset, for the first that does not.
Status CheckReferences(const std::map<std::string, TensorMetadata>& tensors,
                       const ComparedCheckpoints& compared, int32_t world);

}  // namespace ckptdb::planner
