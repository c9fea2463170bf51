#include "engine/save/save_incremental.h"

#include <algorithm>

namespace ckptdb::engine {

void KeepCommit(planner::PreviousCheckpoint committed, int depth,
                KeptCommits* kept) {
  planner::IndexHashes(&committed);
  kept->push_front(std::move(committed));
  while (kept->size() > static_cast<size_t>(std::max(depth, 1)))
    kept->pop_back();
}

void ForgetUncompared(const std::vector<int64_t>& base_ids, KeptCommits* kept) {
  std::erase_if(*kept, [&](const planner::PreviousCheckpoint& commit) {
    return std::find(base_ids.begin(), base_ids.end(), commit.id) ==
           base_ids.end();
  });
}

std::vector<std::string_view> KeysWrittenBy(const planner::SavePlan& plan,
                                            int rank) {
  std::vector<std::string_view> keys;
  for (const auto& tensor : plan.tensors) {
    for (const auto& chunk : tensor.chunks) {
      if (chunk.writer_rank != rank) continue;
      keys.push_back(tensor.flat_key);
      break;
    }
  }
  return keys;
}

planner::PreviousCheckpoint ReadPrevious(
    storage::Store& store, int64_t base_id,
    const std::vector<std::string_view>& keys) {
  planner::PreviousCheckpoint previous;
  if (keys.empty()) return previous;
  auto meta = store.GetMetadata(base_id, keys);
  if (!meta.ok()) return previous;
  previous.id = base_id;
  previous.tensors = std::move(meta->tensors);
  planner::IndexHashes(&previous);
  return previous;
}

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
                return a.box.origin < b.box.origin;
              });
  }
  return own;
}

bool CoversMyChunks(const planner::PreviousCheckpoint& previous,
                    const planner::SavePlan& plan,
                    const std::vector<MyChunk>& mine, int world) {
  auto near = previous.tensors.cbegin();  // mine come in tensor order
  for (const MyChunk& m : mine) {
    const planner::PlannedTensor& tensor = plan.tensors[m.tensor];
    if (planner::CandidateChunk(previous, tensor.flat_key, tensor.dtype,
                                tensor.global_shape, tensor.chunks[m.chunk].box,
                                world, &near) == nullptr)
      return false;
  }
  return true;
}

namespace {

// The commit of checkpoint `id` that `kept` holds, or nullptr.
const planner::PreviousCheckpoint* KeptOf(const KeptCommits& kept, int64_t id) {
  for (const planner::PreviousCheckpoint& commit : kept) {
    if (commit.id == id) return &commit;
  }
  return nullptr;
}

}  // namespace

Status CheckRecordReferences(storage::Store& store,
                             const CheckpointMetadata& meta,
                             const std::vector<int64_t>& base_ids,
                             const KeptCommits& kept) {
  if (meta.info.references.empty()) return Status::OK();
  std::vector<std::string_view> keys;  // meta's tensors with references
  for (const auto& [key, tensor] : meta.tensors) {
    if (std::any_of(tensor.chunks.begin(), tensor.chunks.end(),
                    [](const ChunkMetadata& c) { return c.holder_id != 0; }))
      keys.push_back(key);
  }
  KeptCommits read;
  planner::ComparedCheckpoints compared;
  for (int64_t id : base_ids) {
    const planner::PreviousCheckpoint* held = KeptOf(kept, id);
    if (held == nullptr) {
      CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata record,
                              store.GetMetadata(id, keys));
      held = &read.emplace_back(
          planner::PreviousCheckpoint{id, std::move(record.tensors)});
    }
    compared.push_back(held);
  }
  return planner::CheckReferences(meta.tensors, compared, meta.info.world_size);
}

planner::ComparedCheckpoints ComparedWith(
    const KeptCommits& kept, storage::Store& store,
    const std::vector<int64_t>& base_ids, const planner::SavePlan& plan,
    const std::vector<MyChunk>& mine, int rank, int world, KeptCommits* read) {
  planner::ComparedCheckpoints compared;
  std::vector<std::string_view> keys;  // the tensors this rank writes
  for (int64_t id : base_ids) {
    const planner::PreviousCheckpoint* held = KeptOf(kept, id);
    if (held != nullptr &&
        (rank == 0 || CoversMyChunks(*held, plan, mine, world))) {
      compared.push_back(held);
      continue;
    }
    if (keys.empty()) {
      keys = KeysWrittenBy(plan, rank);
      if (keys.empty() || !store.Refresh().ok()) break;
    }
    planner::PreviousCheckpoint previous = ReadPrevious(store, id, keys);
    if (previous.id != 0)
      compared.push_back(&read->emplace_back(std::move(previous)));
  }
  return compared;
}

}  // namespace ckptdb::engine
