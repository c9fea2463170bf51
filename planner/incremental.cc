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

ContentHashSet::ContentHashSet(
    const std::map<std::string, TensorMetadata>& tensors) {
  size_t n = 0;
  for (const auto& [key, tensor] : tensors) n += tensor.chunks.size();
  size_t size = 16;
  while (size < 2 * n) size *= 2;  // at most half full
  slots_.assign(size, ContentHash{});
  for (const auto& [key, tensor] : tensors) {
    for (const ChunkMetadata& chunk : tensor.chunks) {
      if (!chunk.content_hash) continue;
      const ContentHash& hash = *chunk.content_hash;
      if (hash == ContentHash{}) {
        zero_ = true;
        continue;
      }
      slots_[Slot(hash)] = hash;
    }
  }
}

size_t ContentHashSet::Slot(const ContentHash& hash) const {
  const size_t mask = slots_.size() - 1;
  size_t i = hash.low & mask;
  while (slots_[i] != hash && slots_[i] != ContentHash{}) i = (i + 1) & mask;
  return i;
}

bool ContentHashSet::Contains(const ContentHash& hash) const {
  if (hash == ContentHash{}) return zero_;
  return !slots_.empty() && slots_[Slot(hash)] == hash;
}

void IndexHashes(PreviousCheckpoint* previous) {
  previous->hashes = ContentHashSet(previous->tensors);
}

std::vector<int64_t> ComparedIds(const std::vector<int64_t>& ids, int depth) {
  const size_t n =
      std::min(ids.size(), static_cast<size_t>(std::max(depth, 0)));
  return std::vector<int64_t>(ids.rbegin(), ids.rbegin() + n);
}

CandidateFinder::CandidateFinder(const ComparedCheckpoints& compared,
                                 int32_t world)
    : compared_(compared), world_(world) {
  near_.reserve(compared.size());
  for (const PreviousCheckpoint* previous : compared)
    near_.push_back(previous->tensors.begin());
  found_.reserve(compared.size());
}

const std::vector<Candidate>& CandidateFinder::Find(const std::string& key,
                                                    DType dtype,
                                                    const Shape& global_shape,
                                                    const Box& box) {
  found_.clear();
  for (size_t i = 0; i < compared_.size(); ++i) {
    const ChunkMetadata* chunk = CandidateChunk(
        *compared_[i], key, dtype, global_shape, box, world_, &near_[i]);
    if (chunk != nullptr) found_.push_back({chunk, compared_[i]->id});
  }
  return found_;
}

const ChunkMetadata* CandidateFinder::Begin(const std::string& key, DType dtype,
                                            const Shape& global_shape,
                                            const Box& box) {
  key_ = &key;
  dtype_ = dtype;
  global_shape_ = &global_shape;
  box_ = &box;
  newest_ = compared_.empty()
                ? nullptr
                : CandidateChunk(*compared_[0], key, dtype, global_shape, box,
                                 world_, &near_[0]);
  return newest_;
}

ChunkSource CandidateFinder::Decide(const ContentHash& hash) {
  CKPTDB_ASSERT(key_ != nullptr, "CandidateFinder::Decide before Begin");
  if (!compared_.empty()) {
    const ChunkSource source =
        DecideChunkSource(newest_, compared_[0]->id, hash);
    if (source.reuse) return source;
  }
  for (size_t i = 1; i < compared_.size(); ++i) {
    if (!compared_[i]->hashes.Contains(hash)) continue;
    const ChunkMetadata* chunk = CandidateChunk(
        *compared_[i], *key_, dtype_, *global_shape_, *box_, world_, &near_[i]);
    const ChunkSource source = DecideChunkSource(chunk, compared_[i]->id, hash);
    if (source.reuse) return source;
  }
  return {};
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
                       const ComparedCheckpoints& compared, int32_t world) {
  // The record's chunks come in key order: each compared record is walked
  // once (no lookup per chunk; a record can hold millions).
  CandidateFinder finder(compared, world);
  static const std::vector<Candidate> kNone;
  for (const auto& [key, tensor] : tensors) {
    for (const ChunkMetadata& chunk : tensor.chunks) {
      if (chunk.holder_id == 0) continue;
      // Every candidate with an equal hash holds the chunk's bytes: a
      // reference to any of them is sound (a rank that could not read one of
      // the compared records decided among the others).
      const std::vector<Candidate>& candidates =
          chunk.content_hash
              ? finder.Find(key, tensor.dtype, tensor.global_shape, chunk.box)
              : kNone;
      const ChunkSource reference{true, chunk.holder_id, chunk.writer_rank,
                                  chunk.checksum};
      if (std::any_of(
              candidates.begin(), candidates.end(), [&](const Candidate& c) {
                return DecideChunkSource(c.chunk, c.checkpoint_id,
                                         *chunk.content_hash) == reference;
              }))
        continue;
      std::ostringstream what;
      what << "the chunk of '" << key << "' at offset "
           << ShapeToString(chunk.box.origin)
           << " refers to the bytes written by rank " << chunk.writer_rank
           << " in checkpoint id " << chunk.holder_id << ", but ";
      if (compared.empty()) {
        what << "the save compared it with no checkpoint";
      } else {
        what << "the checkpoints it was compared with (id";
        for (size_t i = 0; i < compared.size(); ++i)
          what << (i == 0 ? " " : ", ") << compared[i]->id;
        what << ") "
             << (candidates.empty() ? "hold no equal chunk there"
                                    : "record other bytes for it");
      }
      return Status::Internal(what.str());
    }
  }
  return Status::OK();
}

}  // namespace ckptdb::planner
