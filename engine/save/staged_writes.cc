#include "engine/save/staged_writes.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "core/checksum.h"
#include "engine/parallel.h"
#include "engine/save/device_staging.h"
#include "planner/write_parts.h"
#include "storage/keys.h"

namespace ckptdb::engine {
namespace {

// Whether the stored bytes an unchanged chunk would refer to still pass their
// checksum. A chunk whose stored copy was damaged after it was written (a
// flipped byte in a value file) is written again from the caller's bytes:
// sharing it would commit, save after save, checkpoints that cannot load that
// tensor while the good bytes are in memory. Costs a read of the bytes
// shared, nothing when every chunk changed. Only the read-write handle (rank
// 0's) checks: the read-only handles of the other ranks compare with their
// own last chunks kept in memory and do not open the store on a save's path
// (their view may be closed, or older than the holder), so they share
// unchecked. A failure other than NotFound (a checkpoint deleted meanwhile)
// writes the chunk, which is always safe. A chunk the handle checked lately
// (CheckedChunks) is not read again.
class StoredChunkCheck {
 public:
  StoredChunkCheck(storage::Store& store, CheckedChunks* checked)
      : store_(store), checked_(checked) {}

  bool Intact(const planner::PlannedTensor& tensor,
              const planner::PlannedChunk& chunk, uint64_t nbytes,
              const planner::ChunkSource& source) {
    if (store_.read_only()) return true;
    key_.clear();
    storage::AppendChunkKey(source.holder_id, source.writer_rank,
                            tensor.flat_key, chunk.box.origin, &key_);
    if (checked_ != nullptr && checked_->Fresh(source.holder_id, key_))
      return true;
    ChunkMetadata stored;
    stored.box = chunk.box;
    stored.writer_rank = source.writer_rank;
    stored.nbytes = nbytes;
    stored.checksum = source.checksum;
    // As DB::Verify reads it: a chunk that reads back only through the copy
    // of its location (its table file damaged around it) is not shared
    // either, or every later checkpoint would depend on that copy alone.
    const Status read =
        store_.VerifyChunk(source.holder_id, tensor.flat_key, stored);
    const bool intact = read.ok() || read.IsNotFound();
    if (intact && checked_ != nullptr)
      checked_->Checked(source.holder_id, key_);
    return intact;
  }

 private:
  storage::Store& store_;
  CheckedChunks* checked_;
  std::string key_;
};

// One chunk: refers to stored bytes when its content hash equals that of the
// same chunk in a compared checkpoint (planner::DecideChunkSource) and those
// bytes are intact (`check`), else added to `writer`; hashed before or as it
// is written (planner::HashBeforeWriting). `finder`: the candidates of the
// part's chunks, taken in key order (null when nothing is compared with).
Result<WrittenChunk> WriteChunk(const WriteContext& context,
                                const planner::PlannedTensor& tensor,
                                const planner::PlannedChunk& chunk,
                                const char* data, uint64_t nbytes,
                                planner::CandidateFinder* finder,
                                StoredChunkCheck& check,
                                storage::StagedFileWriter& writer) {
  WrittenChunk out;
  out.writer_rank = context.rank;
  const std::string_view bytes(data, nbytes);
  if (!context.hash) {
    CKPTDB_ASSIGN_OR_RETURN(
        out.checksum, writer.Add(tensor.flat_key, chunk.box.origin, bytes));
    return out;
  }
  // The newest compared checkpoint's chunk decides how it is hashed; the
  // decision, once hashed, looks at every compared checkpoint.
  const ChunkMetadata* newest =
      finder != nullptr ? finder->Begin(tensor.flat_key, tensor.dtype,
                                        tensor.global_shape, chunk.box)
                        : nullptr;
  auto reuse = [&](const ContentHash& content) {
    planner::ChunkSource source =
        finder != nullptr ? finder->Decide(content) : planner::ChunkSource{};
    if (source.reuse && !check.Intact(tensor, chunk, nbytes, source))
      source = planner::ChunkSource{};
    out.content_hash = content;
    if (source.reuse) {
      out.checksum = source.checksum;
      out.holder_id = source.holder_id;
      out.writer_rank = source.writer_rank;
    }
    return source.reuse;
  };
  if (planner::HashBeforeWriting(newest)) {
    const storage::ChunkDigest digest =
        storage::ChunkChecksumAndContentHash(data, nbytes);
    if (reuse(digest.content)) return out;
    CKPTDB_ASSIGN_OR_RETURN(
        out.checksum,
        writer.Add(tensor.flat_key, chunk.box.origin, bytes, digest.checksum));
    return out;
  }
  bool reused = false;
  CKPTDB_ASSIGN_OR_RETURN(
      const storage::StagedFileWriter::Added added,
      writer.AddUnlessUnchanged(tensor.flat_key, chunk.box.origin, bytes,
                                [&](const ContentHash& content) {
                                  reused = reuse(content);
                                  return reused;
                                }));
  CKPTDB_ASSERT(reused != added.added,
                "a chunk of '" + tensor.flat_key +
                    "' was kept and found unchanged, or neither");
  if (added.added) out.checksum = added.digest.checksum;
  return out;
}

}  // namespace

bool CheckedChunks::Fresh(int64_t holder_id, const std::string& key) const {
  std::lock_guard lock(mu_);
  auto holder = by_holder_.find(holder_id);
  if (holder == by_holder_.end()) return false;
  auto chunk = holder->second.find(key);
  return chunk != holder->second.end() && saves_ < chunk->second;
}

void CheckedChunks::Checked(int64_t holder_id, std::string key) {
  const uint64_t spread = std::hash<std::string>()(key) % kRecheckSaves;
  std::lock_guard lock(mu_);
  by_holder_[holder_id][std::move(key)] = saves_ + kRecheckSaves + spread;
}

void CheckedChunks::EndSave(const std::set<int64_t>& holder_ids) {
  std::lock_guard lock(mu_);
  ++saves_;
  std::erase_if(by_holder_, [&](const auto& entry) {
    return !holder_ids.contains(entry.first);
  });
}

std::vector<uint64_t> BytesInWriteOrder(const std::vector<MyChunk>& mine,
                                        const std::vector<size_t>& order) {
  std::vector<uint64_t> bytes(order.size());
  for (size_t i = 0; i < order.size(); ++i) bytes[i] = mine[order[i]].nbytes;
  return bytes;
}

std::vector<size_t> WriteParts(const std::vector<MyChunk>& mine,
                               const std::vector<size_t>& order, int threads) {
  return planner::SplitIntoParts(BytesInWriteOrder(mine, order), threads);
}

// Streams this rank's chunks into staged files, a part each, in parallel;
// fills `written` (in plan order of the rank's chunks) and `files`.
Status WriteStaged(storage::Store& store, const planner::SavePlan& plan,
                   const std::vector<MyChunk>& mine,
                   const std::vector<size_t>& order,
                   const WriteContext& context,
                   std::vector<WrittenChunk>* written,
                   std::vector<std::string>* files) {
  const std::vector<size_t> part_begin =
      WriteParts(mine, order, context.threads);
  const size_t parts = part_begin.size() - 1;
  written->assign(mine.size(), WrittenChunk{});
  std::vector<std::string> part_files(parts);
  Status status = ParallelFor(parts, context.threads, [&](size_t p) -> Status {
    if (part_begin[p] == part_begin[p + 1]) return Status::OK();
    CKPTDB_ASSIGN_OR_RETURN(
        auto writer,
        store.NewStagedFile(context.id, context.rank, static_cast<int>(p)));
    DeviceChunks device(mine, order, context.copier);
    // The part's chunks come in key order: each finds its tensor of each
    // compared checkpoint from where the last one's was.
    std::optional<planner::CandidateFinder> finder;
    if (context.compared != nullptr && !context.compared->empty())
      finder.emplace(*context.compared, context.world);
    StoredChunkCheck check(store, context.checked);
    for (size_t i = part_begin[p]; i < part_begin[p + 1]; ++i) {
      const MyChunk& m = mine[order[i]];
      const auto& tensor = plan.tensors[m.tensor];
      SnapshotRing::Source source{nullptr, true};
      if (context.snapshot != nullptr) {
        CKPTDB_ASSIGN_OR_RETURN(source, context.snapshot->Take(i));
      }
      const char* data = source.data;
      if (source.direct) {  // from the caller's memory
        Result<const char*> bytes = device.HostBytes(i, part_begin[p + 1]);
        if (!bytes.ok()) {
          if (context.snapshot != nullptr) context.snapshot->DirectDone(i);
          return bytes.status();
        }
        data = *bytes;
      }
      Result<WrittenChunk> chunk =
          WriteChunk(context, tensor, tensor.chunks[m.chunk], data, m.nbytes,
                     finder ? &*finder : nullptr, check, *writer);
      if (context.snapshot != nullptr) {
        if (source.direct) {
          context.snapshot->DirectDone(i);
        } else {
          context.snapshot->Release(i);
        }
      }
      CKPTDB_ASSIGN_OR_RETURN((*written)[order[i]], std::move(chunk));
    }
    CKPTDB_ASSIGN_OR_RETURN(part_files[p], writer->Finish());
    return Status::OK();
  });
  for (auto& f : part_files) {
    if (!f.empty()) files->push_back(std::move(f));
  }
  return status;
}

}  // namespace ckptdb::engine
