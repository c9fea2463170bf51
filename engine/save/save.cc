// DB::Save: layouts gathered once per class of identical ranks, each rank
// planning only the chunks it writes, chunks staged per writer rank, ingested
// and committed by rank 0.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "core/checksum.h"
#include "engine/api/db_impl.h"
#include "engine/api/tensor_checks.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/classes.h"
#include "engine/collectives/wire.h"
#include "engine/copy/box_views.h"
#include "engine/device/device.h"
#include "engine/parallel.h"
#include "engine/save/save_record.h"
#include "engine/save/snapshot_ring.h"
#include "planner/flatten.h"
#include "planner/incremental.h"
#include "planner/retention.h"
#include "planner/save_plan.h"
#include "storage/keys.h"

namespace ckptdb::engine {
namespace {

// Local part of a save: this rank's layout and the views behind its shards
// (a flat range gives one view per box of its decomposition).
Status BuildLayout(const StateDict& state, DeviceCopier* copier,
                   planner::RankSaveLayout* layout,
                   std::vector<TensorView>* views) {
  CKPTDB_ASSIGN_OR_RETURN(auto leaves, planner::Flatten(state));
  for (auto& leaf : leaves) {
    // Kinds travel only when some part is not a str key.
    if (planner::AllStrKeys(leaf.kinds)) leaf.kinds.clear();
    if (leaf.value) {
      layout->values.push_back(
          {leaf.flat_key, leaf.path, *leaf.value, std::move(leaf.kinds)});
      continue;
    }
    CKPTDB_RETURN_IF_ERROR(CheckView(leaf.flat_key, *leaf.tensor, copier));
    for (TensorView& v : BoxViews(*leaf.tensor)) {
      layout->shards.push_back({leaf.flat_key,
                                leaf.path,
                                v.dtype,
                                v.global_shape,
                                {v.global_offset, v.local_shape},
                                leaf.kinds});
      views->push_back(std::move(v));
    }
  }
  return Status::OK();
}

// One chunk this rank writes.
struct MyChunk {
  size_t tensor;
  size_t chunk;
  std::string key;  // storage key, for ordering
  // Dense source: the chunk's bytes. Strided source: the view's data.
  const void* data;
  uint64_t nbytes;
  const Device* device;  // nullptr: host memory
  // A strided source view the chunk is packed from; nullptr when `data` holds
  // the chunk's bytes.
  const TensorView* strided = nullptr;
  // Strided source: the chunk's box in the view's local index space.
  Shape offset;
  Shape lengths;
};

// Address of `chunk` inside the writer's dense shard buffer. The planner cuts
// chunks along outer dimensions only, so the chunk is one contiguous run of
// the shard.
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

// The chunk `c` of `tensor` this rank writes from `view`, its shard.
MyChunk MakeMyChunk(const planner::PlannedTensor& tensor, size_t t, size_t c,
                    const planner::SaveShard& shard, const TensorView& view,
                    int64_t id, int rank) {
  const planner::PlannedChunk& chunk = tensor.chunks[c];
  MyChunk m{
      t,
      c,
      storage::EncodeChunkKey(id, rank, tensor.flat_key, chunk.box.offset),
      view.data,
      chunk.nbytes,
      view.device.type == DeviceType::kCPU ? nullptr : &view.device};
  if (view.is_dense()) {
    m.data = ChunkData(chunk, shard, view);
    return m;
  }
  m.strided = &view;
  m.lengths = chunk.box.shape;
  for (size_t d = 0; d < chunk.box.ndim(); ++d)
    m.offset.push_back(chunk.box.offset[d] - shard.box.offset[d]);
  return m;
}

// Host bytes of a part's chunks, in write order. Chunks of strided host
// views are packed into a buffer of one chunk. Device chunks come through two
// page-locked staging buffers (strided ones packed by 2-D copies): the copy
// of the next device chunk runs while the current one is written.
class DeviceChunks {
 public:
  DeviceChunks(const std::vector<MyChunk>& mine,
               const std::vector<size_t>& order, DeviceCopier* copier)
      : mine_(mine), order_(order), copier_(copier) {}
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
    if (m.device == nullptr) return HostChunk(m);
    if (started_ != i) CKPTDB_RETURN_IF_ERROR(Start(i));  // the part's first
    const int slot = static_cast<int>(i % 2);
    CKPTDB_RETURN_IF_ERROR(copier_->Wait(*m.device, slot));
    pending_[slot] = nullptr;
    // Start the next device chunk of the part, into the other buffer.
    for (size_t j = i + 1; j < end; ++j) {
      if (mine_[order_[j]].device == nullptr) continue;
      if (j % 2 != i % 2) CKPTDB_RETURN_IF_ERROR(Start(j));
      break;
    }
    return staging_[slot].data();
  }

 private:
  const char* HostChunk(const MyChunk& m) {
    if (m.strided == nullptr) return static_cast<const char*>(m.data);
    const TensorView& v = *m.strided;
    packed_.resize(m.nbytes);
    const Shape zero(m.lengths.size(), 0);
    CopyBox({v.data, v.local_shape, m.offset, v.strides}, v.dtype,
            {packed_.data(), m.lengths, zero}, v.dtype, m.lengths);
    return packed_.data();
  }

  Status Start(size_t i) {
    const MyChunk& m = mine_[order_[i]];
    if (copier_ == nullptr)
      return Status::InvalidArgument("no device copier for a device tensor");
    const int slot = static_cast<int>(i % 2);
    staging_[slot].Reserve(copier_, m.nbytes);
    if (m.strided != nullptr) {
      const TensorView& v = *m.strided;
      CKPTDB_RETURN_IF_ERROR(copier_->StartBoxToHost(
          *m.device, {v.data, v.local_shape, m.offset, v.strides},
          staging_[slot].data(), DTypeSize(v.dtype), m.lengths, slot));
    } else {
      CKPTDB_RETURN_IF_ERROR(copier_->StartToHost(
          *m.device, m.data, staging_[slot].data(), m.nbytes, slot));
    }
    pending_[slot] = m.device;
    started_ = i;
    return Status::OK();
  }

  const std::vector<MyChunk>& mine_;
  const std::vector<size_t>& order_;
  DeviceCopier* const copier_;
  StagingBuffer staging_[2];
  const Device* pending_[2] = {nullptr, nullptr};
  size_t started_ = SIZE_MAX;  // the last chunk whose copy was started
  // The packed chunk of a strided host view.
  std::vector<char> packed_;
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

// The chunks this rank saved in checkpoint `id` (`written`, for `mine` of
// `plan`), as the record has them: what its next incremental save compares
// with when `id` is still the latest checkpoint, without reading the store.
planner::PreviousCheckpoint OwnChunks(
    int64_t id, const planner::SavePlan& plan, const std::vector<MyChunk>& mine,
    const std::vector<WrittenChunk>& written) {
  CKPTDB_ASSERT(mine.size() == written.size());
  planner::PreviousCheckpoint own;
  own.id = id;
  for (size_t k = 0; k < mine.size(); ++k) {
    const planner::PlannedTensor& tensor = plan.tensors[mine[k].tensor];
    TensorMetadata& t = own.tensors[tensor.flat_key];
    t.dtype = tensor.dtype;
    t.global_shape = tensor.global_shape;
    t.chunks.push_back(RecordedChunk(tensor.chunks[mine[k].chunk], written[k]));
  }
  for (auto& [key, t] : own.tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const ChunkMetadata& a, const ChunkMetadata& b) {
                return a.global_offset < b.global_offset;
              });
  }
  return own;
}

// Whether `previous` has a chunk to compare with for every chunk of `mine`:
// a rank's own chunks of the last save are enough when it saves the same
// chunks again; otherwise it reads the tensors it writes from the store
// (ReadPrevious), whichever rank wrote their chunks.
bool CoversMyChunks(const planner::PreviousCheckpoint& previous,
                    const planner::SavePlan& plan,
                    const std::vector<MyChunk>& mine, int world) {
  for (const MyChunk& m : mine) {
    const planner::PlannedTensor& tensor = plan.tensors[m.tensor];
    if (planner::CandidateChunk(previous, tensor.flat_key, tensor.dtype,
                                tensor.global_shape, tensor.chunks[m.chunk].box,
                                world) == nullptr)
      return false;
  }
  return true;
}

// This rank's chunks of `plan`, and their order by storage key.
std::vector<MyChunk> CollectMyChunks(const planner::SavePlan& plan,
                                     const planner::RankSaveLayout& layout,
                                     const std::vector<TensorView>& views,
                                     int64_t id, int rank,
                                     std::vector<size_t>* order) {
  std::vector<MyChunk> mine;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const auto& tensor = plan.tensors[t];
    for (size_t c = 0; c < tensor.chunks.size(); ++c) {
      const auto& chunk = tensor.chunks[c];
      if (chunk.writer_rank != rank) continue;
      mine.push_back(MakeMyChunk(tensor, t, c,
                                 layout.shards[chunk.source_shard],
                                 views[chunk.source_shard], id, rank));
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

}  // namespace

namespace {

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
  // An asynchronous save: the chunks' bytes come from here.
  SnapshotRing* snapshot = nullptr;
  // Otherwise device chunks are copied to the host by this.
  DeviceCopier* copier = nullptr;
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
  std::optional<uint64_t> checksum;
  if (context.hash) {
    const storage::ChunkDigest digest =
        storage::ChunkChecksumAndContentHash(data, nbytes);
    out.content_hash = digest.content;
    checksum = digest.checksum;
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
  CKPTDB_ASSIGN_OR_RETURN(out.checksum,
                          writer.Add(tensor.flat_key, chunk.box.offset,
                                     std::string_view(data, nbytes), checksum));
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
    CKPTDB_ASSIGN_OR_RETURN(
        auto writer,
        store.NewStagedFile(context.id, context.rank, static_cast<int>(p)));
    DeviceChunks device(mine, order, context.copier);
    for (size_t i = part_begin[p]; i < part_begin[p + 1]; ++i) {
      const MyChunk& m = mine[order[i]];
      const auto& tensor = plan.tensors[m.tensor];
      CKPTDB_ASSIGN_OR_RETURN(const char* data,
                              context.snapshot != nullptr
                                  ? context.snapshot->Wait(i)
                                  : device.HostBytes(i, part_begin[p + 1]));
      CKPTDB_ASSIGN_OR_RETURN(
          (*written)[order[i]],
          WriteChunk(context, tensor, tensor.chunks[m.chunk], data, m.nbytes,
                     *writer));
      if (context.snapshot != nullptr) context.snapshot->Release(i);
    }
    CKPTDB_ASSIGN_OR_RETURN(part_files[p], writer->Finish());
    return Status::OK();
  });
  for (auto& f : part_files) {
    if (!f.empty()) files->push_back(std::move(f));
  }
  return status;
}

// Rank 0, after checkpoint `id` committed: deletes what `policy` no longer
// keeps, oldest first; `*deleted` says whether it deleted or tried to (a
// failed delete may have taken effect). A failure names the committed
// checkpoint.
Status ApplyRetention(storage::Store& store,
                      const planner::RetentionPolicy& policy, int64_t id,
                      bool* deleted_any) {
  if (!policy.keep_last) return Status::OK();
  Status s = [&]() -> Status {
    CKPTDB_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, store.List());
    for (int64_t doomed : planner::CheckpointsToDelete(all, policy)) {
      *deleted_any = true;
      Status deleted = store.Delete(doomed);
      if (!deleted.ok()) {
        return Status(deleted.code(), "deleting checkpoint id " +
                                          std::to_string(doomed) + ": " +
                                          deleted.message());
      }
    }
    return Status::OK();
  }();
  if (s.ok()) return s;
  return Status(s.code(), "checkpoint id " + std::to_string(id) +
                              " is committed, but applying the retention "
                              "policy (keep_last, keep_every_steps) failed: " +
                              s.message());
}

// Rank 0, before committing `meta`: checks its references against the record
// of checkpoint `base_id` they were decided on (planner::CheckReferences):
// `held` where it is that record, whole (rank 0's last commit), else the
// tensors with references, read from the store.
Status CheckRecordReferences(
    storage::Store& store, const CheckpointMetadata& meta, int64_t base_id,
    const std::optional<planner::PreviousCheckpoint>& held) {
  if (meta.info.references.empty()) return Status::OK();
  if (held && held->id == base_id && base_id != 0)
    return planner::CheckReferences(meta.tensors, *held, meta.info.world_size);
  planner::PreviousCheckpoint base;
  if (base_id != 0) {
    std::vector<std::string> keys;
    for (const auto& [key, tensor] : meta.tensors) {
      if (std::any_of(tensor.chunks.begin(), tensor.chunks.end(),
                      [](const ChunkMetadata& c) { return c.holder_id != 0; }))
        keys.push_back(key);
    }
    CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata read,
                            store.GetMetadata(base_id, keys));
    base.id = base_id;
    base.tensors = std::move(read.tensors);
  }
  return planner::CheckReferences(meta.tensors, base, meta.info.world_size);
}

// Rank 0: every rank's written files and checksums (`results`) become the
// record of the whole plan (every chunk of `classes`), its references checked
// against checkpoint `base_id` (which they were decided on), committed; the
// outcome, encoded for the other ranks.
// `committed` holds the chunks of rank 0's last commit; on success, those of
// this one, for the next incremental save to compare with; then `retention`
// is applied.
std::string CommitOnRoot(storage::Store& store,
                         const planner::SaveClasses& classes,
                         size_t max_chunk_bytes, int64_t id, int64_t base_id,
                         const SaveOptions& options, int world,
                         const std::vector<std::string>& results,
                         std::optional<planner::PreviousCheckpoint>* committed,
                         const planner::RetentionPolicy& retention) {
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
  if (s.ok()) {
    Result<planner::SavePlan> plan =
        planner::BuildClassSavePlan(classes, max_chunk_bytes);
    s = plan.status();
    if (s.ok()) {
      auto built =
          CommitRecord(std::move(plan).value(), id, options, world, all_sums);
      s = built.status();
      if (built.ok()) meta = std::move(built).value();
    }
  }
  if (s.ok()) s = CheckRecordReferences(store, meta, base_id, *committed);
  std::vector<std::string> staged;
  for (auto& f : all_files) staged.insert(staged.end(), f.begin(), f.end());
  if (s.ok()) s = store.Commit(meta, staged);
  if (!s.ok()) store.RemoveStaged(staged);
  committed->reset();
  if (s.ok()) committed->emplace(id, std::move(meta.tensors));
  bool deleted = false;
  if (s.ok()) s = ApplyRetention(store, retention, id, &deleted);
  return EncodeSaveOutcome({s, meta.info, deleted});
}

}  // namespace

// A save between planning and writing: what the background needs, owned.
struct PreparedSave {
  planner::RankSaveLayout layout;
  // Views of the caller's memory; not used after a snapshot.
  std::vector<TensorView> views;
  planner::SaveClasses classes;
  planner::SavePlan plan;
  SaveOptions options;
  int64_t id = 0;
  // The checkpoint an incremental save compares with (0: none).
  int64_t base_id = 0;
  std::vector<MyChunk> mine;
  std::vector<size_t> order;  // of `mine`, by storage key: the write order
};

namespace {

// The background save yields to the caller's threads (the training step)
// where they compete for a core: its thread, and the writer threads it
// starts (which inherit the value), run at a nice value kBackgroundNice
// above the process's. Without competition it runs at full speed. Linux
// gives each thread its own nice value; elsewhere, or when refused, the
// priority stays.
constexpr int kBackgroundNice = 5;

void LowerThisThreadsPriority() {
#if defined(__linux__)
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int current = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0)
    (void)::setpriority(PRIO_PROCESS, tid,
                        std::min(current + kBackgroundNice, 19));
#endif
}

}  // namespace

// The shared state of one asynchronous save.
class AsyncSave : public PendingSave {
 public:
  bool Done() const override { return done_.load(); }
  Result<CheckpointInfo> Wait() override {
    std::lock_guard lock(mu_);
    if (thread_.joinable()) thread_.join();
    return result_;
  }

  template <typename Fn>
  void Start(Fn&& fn) {
    thread_ = std::thread([this, fn = std::forward<Fn>(fn)]() mutable {
      LowerThisThreadsPriority();
      result_ = fn();
      done_ = true;
    });
  }

 private:
  std::mutex mu_;
  std::thread thread_;
  Result<CheckpointInfo> result_ = Status::Internal("save still running");
  std::atomic<bool> done_{false};
};

Result<int64_t> DBImpl::IncrementalBase() {
  if (!options_.incremental) return 0;
  CKPTDB_ASSIGN_OR_RETURN(auto all, store_->List());
  if (all.empty() || store_->read_only())
    return all.empty() ? 0 : all.back().id;
  // Bytes of the latest checkpoint that are lost (a value file missing or cut
  // short) cannot be shared: the save writes every chunk again from the
  // caller's tensors. The store's LOG and `verify` name the lost file.
  const Status shareable = store_->CheckShareable(all.back().id);
  if (shareable.IsCorruption()) return 0;
  CKPTDB_RETURN_IF_ERROR(shareable);
  return all.back().id;
}

Result<PreparedSave> DBImpl::PrepareSave(const StateDict& state,
                                         const SaveOptions& options) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  const int rank = comm_->rank();
  PreparedSave p;
  p.options = options;

  // 1-2. Local layout with the local status, gathered once per class of
  // ranks with identical layouts, once the ranks agree on step, tag and user
  // metadata; 3. this rank's part of the same validated plan on every rank.
  Status local = BuildLayout(state, devices_.copier, &p.layout, &p.views);
  CKPTDB_ASSIGN_OR_RETURN(RankClasses gathered,
                          AllGatherClasses(*comm_, SaveArguments(options), "",
                                           EncodeSaveLayout(local, p.layout)));
  CKPTDB_ASSIGN_OR_RETURN(p.classes, DecodeSaveClasses(gathered));
  CKPTDB_ASSIGN_OR_RETURN(
      p.plan,
      planner::BuildClassSavePlan(p.classes, options_.max_chunk_bytes, rank));

  // Rank 0 checks that it may commit and picks the id, before any byte is
  // written, and the checkpoint an incremental save compares with.
  CKPTDB_ASSIGN_OR_RETURN(
      p.id, IdFromRoot(*comm_, [&]() -> Result<int64_t> {
        if (options.tag) {
          CKPTDB_RETURN_IF_ERROR(store_->CheckTagFree(*options.tag));
        }
        CKPTDB_ASSIGN_OR_RETURN(p.base_id, IncrementalBase());
        return store_->NextCheckpointId();
      }));
  CKPTDB_ASSIGN_OR_RETURN(
      p.base_id,
      IdFromRoot(*comm_, [&]() -> Result<int64_t> { return p.base_id; }));
  p.mine = CollectMyChunks(p.plan, p.layout, p.views, p.id, rank, &p.order);
  return p;
}

Result<CheckpointInfo> DBImpl::FinishSave(const PreparedSave& p,
                                          SnapshotRing* snapshot) {
  const int rank = comm_->rank();
  // 4. Stream this rank's chunks into staged files, in key order, split into
  // parts of contiguous key ranges written in parallel; unchanged chunks are
  // referred to, not written. Every rank keeps the chunks of its last commit
  // (rank 0 the whole record, the others their own): no read (and, on the
  // others, no re-open of their handle) when that is the checkpoint compared
  // with.
  planner::PreviousCheckpoint read;
  const planner::PreviousCheckpoint* previous = &read;
  if (last_commit_ && last_commit_->id == p.base_id && p.base_id != 0 &&
      (rank == 0 ||
       CoversMyChunks(*last_commit_, p.plan, p.mine, comm_->size()))) {
    previous = &*last_commit_;
  } else {
    read = ReadPrevious(*store_, p.base_id, p.plan, rank);
  }
  const WriteContext context{p.id,
                             rank,
                             comm_->size(),
                             io_threads(),
                             p.base_id != 0 || options_.incremental,
                             previous,
                             snapshot,
                             devices_.copier};
  std::vector<WrittenChunk> checksums;
  std::vector<std::string> files;
  const Status written = WriteStaged(*store_, p.plan, p.mine, p.order, context,
                                     &checksums, &files);

  // 5. Rank 0 ingests every rank's files and writes the record; all ranks
  // return its outcome.
  CKPTDB_ASSIGN_OR_RETURN(
      auto results,
      GatherToRoot(*comm_, EncodeWritten(written, files, checksums)));
  std::string outcome;
  if (rank == 0) {
    outcome = CommitOnRoot(*store_, p.classes, options_.max_chunk_bytes, p.id,
                           p.base_id, p.options, comm_->size(), results,
                           &last_commit_,
                           {options_.keep_last, options_.keep_every_steps});
    if (!options_.incremental) last_commit_.reset();
  }
  CKPTDB_RETURN_IF_ERROR(comm_->Broadcast(&outcome, 0));
  SaveOutcome decoded;
  CKPTDB_RETURN_IF_ERROR(DecodeSaveOutcome(outcome, &decoded));
  if (rank != 0) {
    last_commit_.reset();
    if (decoded.status.ok() && written.ok() && options_.incremental)
      last_commit_ = OwnChunks(decoded.info.id, p.plan, p.mine, checksums);
  }
  // The retention policy may have deleted checkpoints, even when a later
  // deletion failed.
  if (decoded.deleted) LetGoOfDeletedFiles();
  CKPTDB_RETURN_IF_ERROR(decoded.status);
  return decoded.info;
}

Result<CheckpointInfo> DBImpl::Save(const StateDict& state,
                                    const SaveOptions& options) {
  WaitPending();
  CKPTDB_ASSIGN_OR_RETURN(PreparedSave p, PrepareSave(state, options));
  return FinishSave(p, nullptr);
}

Result<std::shared_ptr<PendingSave>> DBImpl::SaveAsync(
    const StateDict& state, const SaveOptions& options) {
  WaitPending();
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm_, comm_->CheckBackgroundUse()));
  auto prepared = std::make_shared<PreparedSave>();
  CKPTDB_ASSIGN_OR_RETURN(*prepared, PrepareSave(state, options));
  const PreparedSave& p = *prepared;
  uint64_t total = 0, largest = 0;
  for (const MyChunk& m : p.mine) {
    total += m.nbytes;
    largest = std::max(largest, m.nbytes);
  }
  uint64_t ring = options_.snapshot_bytes == 0
                      ? total
                      : std::min<uint64_t>(options_.snapshot_bytes, total);
  ring = std::max(ring, largest);
  Result<char*> memory = snapshot_memory_.Get(ring);
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm_, memory.status()));
  auto snapshot = std::make_shared<SnapshotRing>(*memory, ring, p.mine.size());
  auto pending = std::make_shared<AsyncSave>();
  auto start = [&] {
    pending->Start([this, prepared, snapshot] {
      return FinishSave(*prepared, snapshot.get());
    });
    pending_ = pending;
  };
  // A ring that holds the whole state is filled before the writers start, so
  // that they do not slow the copy the caller waits for; a smaller one needs
  // them to make room.
  const bool whole = ring >= total;
  if (!whole) start();
  TakeSnapshot(p, *snapshot);
  prepared->views.clear();  // the caller's tensors are not used again
  if (whole) start();
  return std::shared_ptr<PendingSave>(pending);
}

// Copies the rank's chunks, in write order, into `ring` (waiting for room);
// device chunks through page-locked staging, the next copy overlapping this
// one. A failure fails the chunk and every later one: the save then fails on
// every rank, in the background.
void DBImpl::TakeSnapshot(const PreparedSave& p, SnapshotRing& ring) {
  DeviceChunks device(p.mine, p.order, devices_.copier);
  for (size_t i = 0; i < p.order.size(); ++i) {
    const MyChunk& m = p.mine[p.order[i]];
    Result<const char*> bytes = device.HostBytes(i, p.order.size());
    if (!bytes.ok()) {
      ring.Fail(i, bytes.status());
      return;
    }
    char* copy = ring.Allocate(i, m.nbytes);
    std::memcpy(copy, *bytes, m.nbytes);
    ring.Ready(i, copy);
  }
}

void DBImpl::WaitPending() {
  if (pending_ == nullptr) return;
  (void)pending_->Wait();
  pending_.reset();
}

}  // namespace ckptdb::engine
