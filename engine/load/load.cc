// DB::Load: target layouts all-gathered, one read plan on every rank, each
// needed chunk read once by its reader, slices copied into local targets or
// sent to the ranks that need them.
#include <algorithm>
#include <deque>
#include <map>
#include <string_view>

#include "engine/api/db_impl.h"
#include "engine/api/tensor_checks.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/classes.h"
#include "engine/collectives/wire.h"
#include "engine/copy/box_views.h"
#include "engine/device/device.h"
#include "engine/load/load_executor.h"
#include "engine/load/load_planning.h"
#include "planner/flatten.h"
#include "planner/load_plan.h"

namespace ckptdb::engine {
namespace {

struct LocalTargets {
  std::vector<planner::LoadTarget> targets;
  // The box views of the state dict's flat ranges (BoxViews).
  std::deque<TensorView> pieces;
  // Parallel to targets: the state dict's views, or pieces of them.
  std::vector<TensorView*> views;
  std::vector<std::pair<Value*, const Value*>>
      values;  // (leaf, stored value) to assign
};

// The flat keys of the state dict's tensor leaves, sorted as the leaves are
// (FlattenMutable): the tensors whose chunks this rank reads the records of.
// They view the leaves' keys.
std::vector<std::string_view> TensorKeysOf(
    const std::vector<planner::MutableFlatLeaf>& leaves) {
  std::vector<std::string_view> keys;
  keys.reserve(leaves.size());
  for (const auto& leaf : leaves) {
    if (leaf.tensor != nullptr) keys.push_back(leaf.flat_key);
  }
  return keys;
}

// `key` without its "module" parts (those DistributedDataParallel and
// DataParallel put before a wrapped model's keys).
std::string WithoutModuleParts(std::string_view key) {
  std::string out;
  while (!key.empty()) {
    const size_t dot = key.find('.');
    const std::string_view part = key.substr(0, dot);
    if (part != "module") {
      if (!out.empty()) out += '.';
      out += part;
    }
    if (dot == std::string_view::npos) break;
    key.remove_prefix(dot + 1);
  }
  return out;
}

// For the error of a requested `key` the checkpoint lacks: the stored key it
// likely meant, one that differs from it only by "module" parts (a model
// saved wrapped in DistributedDataParallel and loaded bare, or the reverse);
// "" when there is none.
std::string NearMissHint(const std::string& key,
                         const CheckpointMetadata& meta) {
  const std::string wanted = WithoutModuleParts(key);
  auto hint = [&](const std::string& stored) {
    return "; it holds '" + stored +
           "', which differs only by 'module.' parts (a model wrapped in "
           "DistributedDataParallel on one side only)";
  };
  for (const auto& [stored, unused] : meta.tensors) {
    if (WithoutModuleParts(stored) == wanted) return hint(stored);
  }
  for (const auto& [stored, unused] : meta.values) {
    if (WithoutModuleParts(stored) == wanted) return hint(stored);
  }
  return "";
}

// InvalidArgument unless target `view` of tensor `key` can take the `stored`
// tensor: the same global shape, and the same dtype or, with options.cast,
// numeric dtypes on both sides.
Status CheckStoredFits(const std::string& key, const TensorView& view,
                       const TensorMetadata& stored,
                       const LoadOptions& options) {
  if (view.global_shape != stored.global_shape) {
    return Status::InvalidArgument(
        "tensor '" + key + "': target global shape " +
        ShapeToString(view.global_shape) + " differs from stored " +
        ShapeToString(stored.global_shape));
  }
  if (view.dtype != stored.dtype) {
    if (!options.cast) {
      return Status::InvalidArgument("tensor '" + key + "': target dtype " +
                                     std::string(DTypeName(view.dtype)) +
                                     " differs from stored " +
                                     std::string(DTypeName(stored.dtype)) +
                                     " (a load with cast on converts)");
    }
    if (!IsNumeric(view.dtype) || !IsNumeric(stored.dtype)) {
      return Status::InvalidArgument(
          "tensor '" + key + "': cannot cast stored " +
          std::string(DTypeName(stored.dtype)) + " to " +
          std::string(DTypeName(view.dtype)) +
          " (only numeric dtypes convert)");
    }
  }
  return Status::OK();
}

// InvalidArgument unless the tensor leaves' targets (`tensor_targets`, whose
// targets in `out` start at `first_target`) are apart in memory
// (CheckTargetsApart). One array under several keys (tied weights) is loaded
// from the key that sorts last, as if each key were loaded in turn: the
// targets of the others are dropped. Loading them all would write each key's
// bytes into the same memory at once, in an order that differs between runs
// and ranks.
Status KeepTargetsApart(const std::vector<KeyedView>& tensor_targets,
                        std::vector<size_t> first_target, LocalTargets* out) {
  std::vector<size_t> tied_before;
  CKPTDB_RETURN_IF_ERROR(CheckTargetsApart(tensor_targets, &tied_before));
  if (tied_before.empty()) return Status::OK();
  first_target.push_back(out->targets.size());  // the last leaf's end
  size_t kept = 0;
  auto tied = tied_before.begin();
  for (size_t leaf = 0; leaf + 1 < first_target.size(); ++leaf) {
    if (tied != tied_before.end() && *tied == leaf) {
      ++tied;
      continue;
    }
    for (size_t i = first_target[leaf]; i < first_target[leaf + 1]; ++i) {
      if (kept != i) {  // a vector moved into itself would be left empty
        out->targets[kept] = std::move(out->targets[i]);
        out->views[kept] = out->views[i];
      }
      ++kept;
    }
  }
  out->targets.resize(kept);
  out->views.resize(kept);
  return Status::OK();
}

// Matches this rank's leaves against the checkpoint: checks dtypes and shapes,
// lists missing and unexpected keys. The leaves come sorted by flat key
// (FlattenMutable), as the checkpoint's maps are: one walk over each, no
// lookups.
Status MatchLeaves(std::vector<planner::MutableFlatLeaf>& leaves,
                   const CheckpointMetadata& meta, const LoadOptions& options,
                   DeviceCopier* copier, LocalTargets* out,
                   LoadResult* result) {
  CKPTDB_ASSERT(std::is_sorted(
      leaves.begin(), leaves.end(),
      [](const auto& a, const auto& b) { return a.flat_key < b.flat_key; }));
  std::vector<KeyedView> tensor_targets;
  tensor_targets.reserve(leaves.size());
  // Parallel to tensor_targets: where its targets start in out->targets.
  std::vector<size_t> first_target;
  first_target.reserve(leaves.size());
  const std::string where = "checkpoint id " + std::to_string(meta.info.id);
  auto tensor = meta.tensors.begin();
  auto value = meta.values.begin();
  // The checkpoint's keys (its tensors' and values') before `key` that no
  // leaf asks for: those after the previous leaf's.
  const std::string* previous = nullptr;
  auto unasked = [&](auto& it, const auto& map, const std::string* key) {
    for (; it != map.end() && (key == nullptr || it->first < *key); ++it) {
      if (previous == nullptr || it->first != *previous)
        result->unexpected_keys.push_back(it->first);
    }
  };
  for (auto& leaf : leaves) {
    const std::string& key = leaf.flat_key;
    unasked(tensor, meta.tensors, &key);
    unasked(value, meta.values, &key);
    previous = &key;
    const bool is_tensor = tensor != meta.tensors.end() && tensor->first == key;
    const bool is_value = value != meta.values.end() && value->first == key;
    if (!is_tensor && !is_value) {
      if (options.strict) {
        return Status::NotFound("key '" + key + "' is not in " + where +
                                NearMissHint(key, meta) +
                                " (a load with strict off skips missing keys)");
      }
      result->missing_keys.push_back(key);
      continue;
    }
    if (leaf.value) {
      if (!is_value) {
        return Status::InvalidArgument("key '" + key + "' is a tensor in " +
                                       where +
                                       " but a small value in the state dict");
      }
      out->values.emplace_back(leaf.value, &value->second);
      continue;
    }
    TensorView& view = *leaf.tensor;
    if (!is_tensor) {
      return Status::InvalidArgument("key '" + key + "' is a small value (" +
                                     std::string(ValueTypeName(value->second)) +
                                     ") in " + where +
                                     " but a tensor in the state dict");
    }
    CKPTDB_RETURN_IF_ERROR(CheckTargetView(key, view, copier));
    tensor_targets.push_back({key, &view});
    first_target.push_back(out->targets.size());
    CKPTDB_RETURN_IF_ERROR(CheckStoredFits(key, view, tensor->second, options));
    if (!view.is_flat_range()) {
      // A box already: the executor writes through the state dict's view.
      out->targets.push_back({key, view.box()});
      out->views.push_back(&view);
      continue;
    }
    for (TensorView& piece : BoxViews(view)) {
      out->targets.push_back({key, piece.box()});
      out->views.push_back(&out->pieces.emplace_back(std::move(piece)));
    }
  }
  std::vector<std::string>& unexpected = result->unexpected_keys;
  unasked(tensor, meta.tensors, nullptr);  // the keys after the last leaf's
  unasked(value, meta.values, nullptr);
  // Walked as two lists: in key order, as the checkpoint lists its keys.
  if (!std::is_sorted(unexpected.begin(), unexpected.end()))
    std::sort(unexpected.begin(), unexpected.end());
  return KeepTargetsApart(tensor_targets, std::move(first_target), out);
}

}  // namespace

int DBImpl::TransportDevice(const std::vector<TensorView*>& views) const {
  DeviceCopier* copier = devices_.copier;
  if (copier == nullptr || !transport_failure_.ok()) return -1;
  for (const TensorView* view : views) {
    if (view->device.type == DeviceType::kCUDA) return view->device.index;
  }
  Result<Device> device = copier->DefaultDevice();
  return device.ok() ? device->index : -1;
}

Result<DeviceTransport*> DBImpl::TransportFor(const std::vector<int>& devices) {
  for (int device : devices) {
    if (device < 0) return nullptr;  // some rank cannot reach device memory
  }
  if (transport_ != nullptr && transport_devices_ == devices)
    return transport_.get();
  transport_.reset();
  auto created = devices_.CreateTransport(
      *comm_, {DeviceType::kCUDA, devices[comm_->rank()]});
  const Status agreed = AgreeOnStatus(*comm_, created.status());
  if (!agreed.ok()) {
    // Not retried by this DB: loads move device slices through host memory.
    transport_failure_ = agreed;
    return nullptr;
  }
  transport_ = std::move(created).value();
  transport_devices_ = devices;
  return transport_.get();
}

Result<LoadResult> DBImpl::Load(StateDict& state,
                                const CheckpointSelector& which,
                                const LoadOptions& options) {
  std::lock_guard one_at_a_time(collective_mu_);
  CKPTDB_RETURN_IF_ERROR(WaitPending());
  // "The latest" is whichever checkpoint is newest while the load runs: when
  // the store's writer deletes the one a load reads (retention, beside a
  // reader that follows a training run), a strict load starts again from the
  // newer one, a few times at most; it fills every target again. Not a
  // non-strict one: the newer checkpoint may lack keys whose targets the
  // first attempt had begun to fill. The ranks agree on every outcome, so they
  // start again together.
  constexpr int kLatestAttempts = 4;
  const bool latest = which.kind == CheckpointSelector::Kind::kLatest;
  for (int attempt = 1;; ++attempt) {
    int64_t resolved = 0;
    Result<LoadResult> loaded = LoadNow(state, which, options, &resolved);
    if (loaded.ok() || !loaded.status().IsNotFound() || resolved == 0)
      return NotingPeerClosing(std::move(loaded));
    // Rank 0 tells what the selector names now; when it is the same
    // checkpoint, the NotFound was the load's own (a missing key).
    Result<int64_t> now = IdFromRoot(*comm_, [&]() -> Result<int64_t> {
      CKPTDB_RETURN_IF_ERROR(store_->Refresh());
      return store_->Resolve(which);
    });
    if (now.ok() && *now == resolved)
      return NotingPeerClosing(std::move(loaded));
    if (!now.ok() && !now.status().IsNotFound())
      return NotingPeerClosing(Result<LoadResult>(now.status()));
    const std::string deleted =
        "load of " +
        (latest ? std::string("the latest checkpoint") : which.ToString()) +
        ": checkpoint id " + std::to_string(resolved) +
        " was deleted by the store's writer while it was read";
    if (!latest || !now.ok()) return loaded.status().WithContext(deleted);
    if (!options.strict) {
      return loaded.status().WithContext(
          deleted +
          " (a load with strict off does not start again from the newer "
          "one, which may lack keys it had begun to fill: load again)");
    }
    if (attempt == kLatestAttempts) {
      return loaded.status().WithContext(
          deleted + ", " + std::to_string(attempt) +
          " times in a row (its retention deletes them faster than this load "
          "reads them)");
    }
  }
}

Result<LoadResult> DBImpl::LoadNow(StateDict& state,
                                   const CheckpointSelector& which,
                                   const LoadOptions& options,
                                   int64_t* resolved) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  const int world = comm_->size();
  // Every tensor's dtype and shape (the main record), with the chunks of the
  // tensors this rank's state dict holds only. A state dict that does not
  // flatten (or a binding's stand-in for one it could not convert) is this
  // rank's input error, which every rank reports before anything the store
  // says (an empty store, a missing checkpoint).
  Result<std::vector<planner::MutableFlatLeaf>> leaves =
      planner::FlattenMutable(state);
  if (!leaves.ok() && world == 1) return leaves.status();
  const CallArguments args = LoadArguments(which, options, leaves.status());
  const std::vector<std::string_view> keys =
      leaves.ok() ? TensorKeysOf(*leaves) : std::vector<std::string_view>{};
  CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata meta,
                          ResolveCollective(which, args, &keys, resolved));

  LoadResult result;
  LocalTargets local;
  RankTargets own, shared;
  own.status = leaves.ok() ? MatchLeaves(*leaves, meta, options,
                                         devices_.copier, &local, &result)
                           : leaves.status();
  uint64_t state_bytes = 0;
  for (const TensorView* view : local.views) {
    state_bytes += static_cast<uint64_t>(NumElements(view->local_shape)) *
                   DTypeSize(view->dtype);
  }
  own.buffer_bytes = load_buffer_bytes(state_bytes);
  own.device = TransportDevice(local.views);
  shared.targets = std::move(local.targets);
  for (const TensorView* view : local.views) {
    shared.placements.push_back(
        {view->dtype, view->device.type == DeviceType::kCUDA &&
                          view->device.index == own.device});
  }
  // Targets and placements travel once per class of identical ranks; each
  // rank plans only its own reads, sends and receives.
  CKPTDB_ASSIGN_OR_RETURN(RankClasses gathered,
                          AllGatherClasses(*comm_, args, EncodeTargets(own),
                                           EncodeTargets(shared)));
  CKPTDB_ASSIGN_OR_RETURN(
      RankLoadPlanning planned,
      PlanRankLoad(meta.tensors, gathered, comm_->rank(), &shared));
  const GatheredTargets& all = planned.all;
  DeviceTransport* transport = nullptr;
  if (world > 1 && all.any_on_device) {
    CKPTDB_ASSIGN_OR_RETURN(transport, TransportFor(all.devices));
  }
  const planner::PlacementLookup placement = [&](int rank, size_t target) {
    return all.classes.placements[all.classes.class_of_rank[rank]][target];
  };
  CKPTDB_RETURN_IF_ERROR(ExecuteLoad(
      {meta, planned.plan, local.views, *store_, *comm_, io_threads(),
       all.buffer_bytes, placement, devices_.copier, transport, load_scratch_},
      &result.stats));
  for (auto& [leaf, stored] : local.values) *leaf = *stored;
  return result;
}

}  // namespace ckptdb::engine
