// DB::Save: layouts gathered once per class of identical ranks, each rank
// planning only the chunks it writes, chunks staged per writer rank, ingested
// and committed by rank 0.
#include <algorithm>
#include <cstdio>

#include "engine/src/agreement.h"
#include "engine/src/classes.h"
#include "engine/src/db_impl.h"
#include "engine/src/device.h"
#include "engine/src/parallel.h"
#include "engine/src/save_record.h"
#include "engine/src/tensor_checks.h"
#include "engine/src/wire.h"
#include "planner/flatten.h"
#include "planner/incremental.h"
#include "planner/save_plan.h"
#include "storage/checksum.h"
#include "storage/keys.h"

namespace ckptdb::engine {
namespace {

// Local part of a save: this rank's layout and the views behind its shards.
Status BuildLayout(const StateDict& state, planner::RankSaveLayout* layout,
                   std::vector<const TensorView*>* views) {
  ASSIGN_OR_RETURN(auto leaves, planner::Flatten(state));
  for (auto& leaf : leaves) {
    // Kinds travel only when some part is not a str key.
    if (planner::AllStrKeys(leaf.kinds)) leaf.kinds.clear();
    if (leaf.value) {
      layout->values.push_back(
          {leaf.flat_key, leaf.path, *leaf.value, std::move(leaf.kinds)});
      continue;
    }
    const TensorView& v = *leaf.tensor;
    RETURN_IF_ERROR(CheckView(leaf.flat_key, v));
    layout->shards.push_back({leaf.flat_key,
                              leaf.path,
                              v.dtype,
                              v.global_shape,
                              {v.global_offset, v.local_shape},
                              std::move(leaf.kinds)});
    views->push_back(&v);
  }
  return Status::OK();
}

// One chunk this rank writes.
struct MyChunk {
  size_t tensor;
  size_t chunk;
  std::string key;  // storage key, for ordering
  const void* data;
  uint64_t nbytes;
  const Device* device;  // nullptr: host memory
};

// Address of `chunk` inside the writer's shard buffer. The planner cuts chunks
// along outer dimensions only, so the chunk is one contiguous run of the shard.
const void* ChunkData(const planner::PlannedChunk& chunk,
                      const planner::SaveShard& shard, const TensorView& view) {
  int64_t linear = 0;
  for (size_t d = 0; d < shard.box.ndim(); ++d) {
    linear = linear * shard.box.shape[d] +
             (chunk.box.offset[d] - shard.box.offset[d]);
  }
  return static_cast<const char*>(view.data) +
         static_cast<size_t>(linear) * DTypeSize(view.dtype);
}

// Host bytes of a part's chunks, in write order. Device chunks come through
// two page-locked staging buffers: the copy of the next device chunk runs
// while the current one is written.
class DeviceChunks {
 public:
  DeviceChunks(const std::vector<MyChunk>& mine,
               const std::vector<size_t>& order)
      : mine_(mine), order_(order) {}
  DeviceChunks(const DeviceChunks&) = delete;
  DeviceChunks& operator=(const DeviceChunks&) = delete;
  // Copies in flight must finish before their buffers go.
  ~DeviceChunks() {
    for (int slot = 0; slot < 2; ++slot) {
      if (pending_[slot] != nullptr) (void)copier_->Wait(*pending_[slot], slot);
    }
  }

  // The bytes of chunk `i` (an index into `order`); `end` bounds the part.
  Result<const char*> HostBytes(size_t i, size_t end) {
    const MyChunk& m = mine_[order_[i]];
    if (m.device == nullptr) return static_cast<const char*>(m.data);
    if (started_ != i) RETURN_IF_ERROR(Start(i));  // the part's first
    const int slot = static_cast<int>(i % 2);
    RETURN_IF_ERROR(copier_->Wait(*m.device, slot));
    pending_[slot] = nullptr;
    // Start the next device chunk of the part, into the other buffer.
    for (size_t j = i + 1; j < end; ++j) {
      if (mine_[order_[j]].device == nullptr) continue;
      if (j % 2 != i % 2) RETURN_IF_ERROR(Start(j));
      break;
    }
    return staging_[slot].data();
  }

 private:
  Status Start(size_t i) {
    const MyChunk& m = mine_[order_[i]];
    if (copier_ == nullptr) copier_ = CurrentDeviceCopier();
    if (copier_ == nullptr)
      return Status::InvalidArgument("no device copier for a device tensor");
    const int slot = static_cast<int>(i % 2);
    staging_[slot].Reserve(copier_, m.nbytes);
    RETURN_IF_ERROR(copier_->StartToHost(
        *m.device, m.data, staging_[slot].data(), m.nbytes, slot));
    pending_[slot] = m.device;
    started_ = i;
    return Status::OK();
  }

  const std::vector<MyChunk>& mine_;
  const std::vector<size_t>& order_;
  DeviceCopier* copier_ = nullptr;
  StagingBuffer staging_[2];
  const Device* pending_[2] = {nullptr, nullptr};
  size_t started_ = SIZE_MAX;  // the last chunk whose copy was started
};

std::string EncodeWritten(const Status& status,
                          const std::vector<std::string>& files,
                          const std::vector<WrittenChunk>& chunks) {
  WireWriter w;
  w.Status(status);
  w.Strings(files);
  w.U64(chunks.size());
  for (const WrittenChunk& c : chunks) {
    w.U64(c.checksum);
    w.U64(c.content_hash ? 1 : 0);
    w.U64(c.content_hash ? c.content_hash->low : 0);
    w.U64(c.content_hash ? c.content_hash->high : 0);
    w.I64(c.holder_id);
    w.I64(c.writer_rank);
  }
  return w.Take();
}

Status DecodeWritten(std::string_view bytes, Status* status,
                     std::vector<std::string>* files,
                     std::vector<WrittenChunk>* chunks) {
  WireReader r(bytes);
  uint64_t n;
  const Status malformed =
      Status::Internal("malformed save result from a rank");
  if (!r.Status(status) || !r.Strings(files) || !r.U64(&n) ||
      n > bytes.size() / 48) {
    return malformed;
  }
  chunks->resize(n);
  for (auto& c : *chunks) {
    uint64_t hashed = 0;
    ContentHash hash;
    int64_t writer = 0;
    if (!r.U64(&c.checksum) || !r.U64(&hashed) || !r.U64(&hash.low) ||
        !r.U64(&hash.high) || !r.I64(&c.holder_id) || !r.I64(&writer))
      return malformed;
    if (hashed != 0) c.content_hash = hash;
    c.writer_rank = static_cast<int32_t>(writer);
  }
  return Status::OK();
}

// The chunks of the checkpoint an incremental save compares with, for the
// tensors this rank writes: none when `base_id` is 0 (the first save, or
// incremental saves off) or when they cannot be read (every chunk is then
// written).
planner::PreviousCheckpoint ReadPrevious(storage::Store& store, int64_t base_id,
                                         const planner::SavePlan& plan,
                                         int rank) {
  planner::PreviousCheckpoint previous;
  if (base_id == 0 || !store.Refresh().ok()) return previous;
  std::vector<std::string> keys;
  for (const auto& tensor : plan.tensors) {
    for (const auto& chunk : tensor.chunks) {
      if (chunk.writer_rank != rank) continue;
      keys.push_back(tensor.flat_key);
      break;
    }
  }
  if (keys.empty()) return previous;
  auto meta = store.GetMetadata(base_id, keys);
  if (!meta.ok()) return previous;
  previous.id = base_id;
  previous.tensors = std::move(meta->tensors);
  return previous;
}

// This rank's chunks of `plan`, and their order by storage key.
std::vector<MyChunk> CollectMyChunks(
    const planner::SavePlan& plan, const planner::RankSaveLayout& layout,
    const std::vector<const TensorView*>& views, int64_t id, int rank,
    std::vector<size_t>* order) {
  std::vector<MyChunk> mine;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const auto& tensor = plan.tensors[t];
    for (size_t c = 0; c < tensor.chunks.size(); ++c) {
      const auto& chunk = tensor.chunks[c];
      if (chunk.writer_rank != rank) continue;
      const auto& shard = layout.shards[chunk.source_shard];
      mine.push_back(
          {t, c,
           storage::EncodeChunkKey(id, rank, tensor.flat_key, chunk.box.offset),
           ChunkData(chunk, shard, *views[chunk.source_shard]), chunk.nbytes,
           views[chunk.source_shard]->device.type == DeviceType::kCPU
               ? nullptr
               : &views[chunk.source_shard]->device});
    }
  }
  order->resize(mine.size());
  for (size_t i = 0; i < order->size(); ++i) (*order)[i] = i;
  std::sort(order->begin(), order->end(),
            [&](size_t a, size_t b) { return mine[a].key < mine[b].key; });
  return mine;
}

// Where each of the parts written in parallel begins in `order` (one more
// entry: the end): part p takes the chunks, in key order, whose cumulative
// bytes fall in its share; a part per 64 MiB, at most `threads`.
std::vector<size_t> SplitIntoParts(const std::vector<MyChunk>& mine,
                                   const std::vector<size_t>& order,
                                   int threads) {
  uint64_t my_bytes = 0;
  for (const auto& m : mine) my_bytes += m.nbytes;
  const size_t parts = std::clamp<size_t>(
      my_bytes / (size_t{64} << 20), 1,
      std::max<size_t>(1, std::min<size_t>(threads, mine.size())));
  std::vector<size_t> part_begin(parts + 1, order.size());
  uint64_t seen = 0;
  size_t p = 0;
  part_begin[0] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    while (p + 1 < parts && seen >= my_bytes * (p + 1) / parts)
      part_begin[++p] = i;
    seen += mine[order[i]].nbytes;
  }
  for (size_t q = p + 1; q < parts; ++q) part_begin[q] = order.size();
  return part_begin;
}

// How this rank writes its chunks.
struct WriteContext {
  int64_t id = 0;
  int rank = 0;
  int world = 1;
  int threads = 1;
  // Hash every chunk (incremental saves on).
  bool hash = false;
  // What the chunks are compared with.
  const planner::PreviousCheckpoint* previous = nullptr;
};

// One chunk: refers to stored bytes when its content hash equals the previous
// checkpoint's chunk (planner::DecideChunkSource), else added to `writer`.
Result<WrittenChunk> WriteChunk(const WriteContext& context,
                                const planner::PlannedTensor& tensor,
                                const planner::PlannedChunk& chunk,
                                const char* data, uint64_t nbytes,
                                storage::StagedFileWriter& writer) {
  WrittenChunk out;
  out.writer_rank = context.rank;
  if (context.hash) {
    out.content_hash = storage::ChunkContentHash(data, nbytes);
    const planner::ChunkSource source = planner::DecideChunkSource(
        planner::CandidateChunk(*context.previous, tensor.flat_key,
                                tensor.dtype, tensor.global_shape, chunk.box,
                                context.world),
        context.previous->id, *out.content_hash);
    if (source.reuse) {
      out.checksum = source.checksum;
      out.holder_id = source.holder_id;
      out.writer_rank = source.writer_rank;
      return out;
    }
  }
  ASSIGN_OR_RETURN(out.checksum, writer.Add(tensor.flat_key, chunk.box.offset,
                                            std::string_view(data, nbytes)));
  return out;
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
      SplitIntoParts(mine, order, context.threads);
  const size_t parts = part_begin.size() - 1;
  written->assign(mine.size(), WrittenChunk{});
  std::vector<std::string> part_files(parts);
  Status status = ParallelFor(parts, context.threads, [&](size_t p) -> Status {
    if (part_begin[p] == part_begin[p + 1]) return Status::OK();
    ASSIGN_OR_RETURN(auto writer, store.NewStagedFile(context.id, context.rank,
                                                      static_cast<int>(p)));
    DeviceChunks device(mine, order);
    for (size_t i = part_begin[p]; i < part_begin[p + 1]; ++i) {
      const MyChunk& m = mine[order[i]];
      const auto& tensor = plan.tensors[m.tensor];
      ASSIGN_OR_RETURN(const char* data,
                       device.HostBytes(i, part_begin[p + 1]));
      ASSIGN_OR_RETURN((*written)[order[i]],
                       WriteChunk(context, tensor, tensor.chunks[m.chunk], data,
                                  m.nbytes, *writer));
    }
    ASSIGN_OR_RETURN(part_files[p], writer->Finish());
    return Status::OK();
  });
  for (auto& f : part_files) {
    if (!f.empty()) files->push_back(std::move(f));
  }
  return status;
}

// Rank 0: every rank's written files and checksums (`results`) become the
// record of the whole plan (every chunk of `classes`), committed; the outcome,
// encoded for the other ranks.
// On success, `committed` holds the checkpoint's chunks, for the next
// incremental save to compare with.
std::string CommitOnRoot(
    storage::Store& store, const planner::SaveClasses& classes,
    size_t max_chunk_bytes, int64_t id, const SaveOptions& options, int world,
    const std::vector<std::string>& results,
    std::optional<planner::PreviousCheckpoint>* committed) {
  std::vector<Status> write_statuses(world);
  std::vector<std::vector<std::string>> all_files(world);
  std::vector<std::vector<WrittenChunk>> all_sums(world);
  Status s;
  for (int r = 0; r < world && s.ok(); ++r) {
    s = DecodeWritten(results[r], &write_statuses[r], &all_files[r],
                      &all_sums[r]);
  }
  if (s.ok()) s = FirstError(write_statuses);
  CheckpointMetadata meta;
  Result<planner::SavePlan> plan = Status::OK();
  if (s.ok()) {
    plan = planner::BuildClassSavePlan(classes, max_chunk_bytes);
    s = plan.status();
  }
  if (s.ok()) {
    auto built =
        CommitRecord(std::move(plan).value(), id, options, world, all_sums);
    s = built.status();
    if (built.ok()) meta = std::move(built).value();
  }
  std::vector<std::string> staged;
  for (auto& f : all_files) staged.insert(staged.end(), f.begin(), f.end());
  if (s.ok()) s = store.Commit(meta, staged);
  if (!s.ok()) store.RemoveStaged(staged);
  committed->reset();
  if (s.ok()) committed->emplace(id, std::move(meta.tensors));
  return EncodeInfo(s, meta.info);
}

}  // namespace

Result<int64_t> DBImpl::IncrementalBase() {
  if (!options_.incremental) return 0;
  ASSIGN_OR_RETURN(auto all, store_->List());
  return all.empty() ? 0 : all.back().id;
}

Result<CheckpointInfo> DBImpl::Save(const StateDict& state,
                                    const SaveOptions& options) {
  RETURN_IF_ERROR(CheckOpen());
  const int rank = comm_->rank();
  const int world = comm_->size();

  // 1-2. Local layout with the local status, gathered once per class of
  // ranks with identical layouts, once the ranks agree on step, tag and user
  // metadata; 3. this rank's part of the same validated plan on every rank.
  planner::RankSaveLayout layout;
  std::vector<const TensorView*> views;
  Status local = BuildLayout(state, &layout, &views);
  ASSIGN_OR_RETURN(RankClasses gathered,
                   AllGatherClasses(*comm_, SaveArguments(options), "",
                                    EncodeSaveLayout(local, layout)));
  ASSIGN_OR_RETURN(planner::SaveClasses classes, DecodeSaveClasses(gathered));
  ASSIGN_OR_RETURN(
      planner::SavePlan plan,
      planner::BuildClassSavePlan(classes, options_.max_chunk_bytes, rank));

  // Rank 0 checks that it may commit and picks the id, before any byte is
  // written, and the checkpoint an incremental save compares with.
  int64_t base_id = 0;
  ASSIGN_OR_RETURN(const int64_t id,
                   IdFromRoot(*comm_, [&]() -> Result<int64_t> {
                     if (options.tag) {
                       RETURN_IF_ERROR(store_->CheckTagFree(*options.tag));
                     }
                     ASSIGN_OR_RETURN(base_id, IncrementalBase());
                     return store_->NextCheckpointId();
                   }));
  ASSIGN_OR_RETURN(base_id, IdFromRoot(*comm_, [&]() -> Result<int64_t> {
                     return base_id;
                   }));

  // 4. Stream this rank's chunks into staged files, in key order, split into
  // parts of contiguous key ranges written in parallel; unchanged chunks are
  // referred to, not written.
  std::vector<size_t> order;
  const std::vector<MyChunk> mine =
      CollectMyChunks(plan, layout, views, id, rank, &order);
  // Rank 0 keeps the chunks of its last commit: no read when that is the
  // checkpoint compared with.
  planner::PreviousCheckpoint read;
  const planner::PreviousCheckpoint* previous = &read;
  if (last_commit_ && last_commit_->id == base_id && base_id != 0) {
    previous = &*last_commit_;
  } else {
    read = ReadPrevious(*store_, base_id, plan, rank);
  }
  const WriteContext context{
      id,      rank, world, io_threads(), base_id != 0 || options_.incremental,
      previous};
  std::vector<WrittenChunk> checksums;
  std::vector<std::string> files;
  const Status written =
      WriteStaged(*store_, plan, mine, order, context, &checksums, &files);

  // 5. Rank 0 ingests every rank's files and writes the record; all ranks
  // return its outcome.
  ASSIGN_OR_RETURN(
      auto results,
      GatherToRoot(*comm_, EncodeWritten(written, files, checksums)));
  std::string outcome;
  if (rank == 0) {
    outcome = CommitOnRoot(*store_, classes, options_.max_chunk_bytes, id,
                           options, world, results, &last_commit_);
    if (!options_.incremental) last_commit_.reset();
  }
  RETURN_IF_ERROR(comm_->Broadcast(&outcome, 0));
  Status committed;
  CheckpointInfo info;
  RETURN_IF_ERROR(DecodeInfo(outcome, &committed, &info));
  RETURN_IF_ERROR(committed);
  return info;
}

}  // namespace ckptdb::engine
