#pragma once

// A Llama-3-class model's sharded training state, as the planning simulator
// (plan_sim.cc) and its tests see it: for a parallel layout and a rank, the
// shards that rank holds. Pure: no I/O, deterministic.
//
// Layout (Megatron-style):
// - Layers are split over PP stages as evenly as possible; when they do not
//   divide, the stages at the ends hold one layer fewer, taken alternately
//   from the first and the last stage inwards (126 layers on 16 stages:
//   7, 8, ..., 8, 7).
// - Per layer: q, k, v (column-parallel: dim 0 split over TP), o
//   (row-parallel: dim 1), gate and up (dim 0), down (dim 1), and two RMSNorm
//   weights (attention_norm, ffn_norm) replicated over TP. The embedding
//   (first stage) and the LM head (last stage) are split over TP on the vocab
//   dim; the final norm (last stage) is replicated over TP.
// - Every parameter has four tensors sharded alike: the bf16 weight
//   ("model.<param>"), and the fp32 master weight, exp_avg and exp_avg_sq
//   ("optim.master.<param>", "optim.exp_avg.<param>",
//   "optim.exp_avg_sq.<param>").
// - A dimension of n elements split over p ranks gives rank i the rows
//   [i * ceil(n/p), min(n, (i + 1) * ceil(n/p))): every tensor is partitioned
//   exactly, the last shards shorter (or empty: a rank holds no shard of a
//   tensor whose split gives it nothing).
// - Ranks: rank = dp_index * (tp * pp) + pp_index * tp + tp_index (TP
//   fastest, then PP, then DP). Data-parallel replicas hold identical shards.

#include <cstdint>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"
#include "core/box_geometry.h"
#include "planner/flatten.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"

namespace ckptdb::bench {

// The model's dimensions. Defaults: a Llama-3-405B-class model.
struct LlamaConfig {
  // Transformer layers.
  int layers = 126;
  // Model (residual) width; also the rows of q and the columns of o.
  int64_t hidden = 16384;
  // MLP width (gate, up rows; down columns).
  int64_t ffn = 53248;
  // Vocabulary (embedding and LM head rows).
  int64_t vocab = 128256;
  // Attention heads; head dim = hidden / heads.
  int64_t heads = 128;
  // Key/value heads (grouped-query attention): k and v have kv_heads * head
  // dim rows.
  int64_t kv_heads = 8;
};

// A 3-D parallel layout: tp * pp * dp ranks.
struct Parallelism {
  // Tensor-parallel degree.
  int tp = 1;
  // Pipeline stages.
  int pp = 1;
  // Data-parallel replicas.
  int dp = 1;
  int world() const { return tp * pp * dp; }
};

// Where a rank sits in the layout.
struct RankCoords {
  int tp_index = 0;
  int pp_index = 0;
  int dp_index = 0;
};

// rank = dp_index * (tp * pp) + pp_index * tp + tp_index.
int RankOf(const Parallelism& par, const RankCoords& coords);
// Inverse of RankOf. REQUIRES: 0 <= rank < par.world().
RankCoords CoordsOf(const Parallelism& par, int rank);

// InvalidArgument (naming the field) unless every size is positive, hidden
// divides by heads, and there are at least as many layers as stages.
Status Validate(const LlamaConfig& model, const Parallelism& par);

// The layers of stage `stage` of `pp`: [first, end) (layout above).
// REQUIRES: 0 <= stage < pp <= layers.
std::pair<int, int> StageLayers(int layers, int pp, int stage);

// One tensor of the model (all of it).
struct ModelTensor {
  std::string flat_key;
  planner::Path path;
  DType dtype = DType::kFloat32;
  Shape global_shape;
};

// One rank's piece of a tensor.
struct ModelShard {
  ModelTensor tensor;
  planner::Box box;
  uint64_t nbytes() const {
    return static_cast<uint64_t>(box.volume()) * DTypeSize(tensor.dtype);
  }
};

// Every tensor of the model, sorted by flat key.
std::vector<ModelTensor> ModelTensors(const LlamaConfig& model);

// The shards `rank` holds, sorted by flat key (the order DB::Save lists a
// state dict's leaves in). REQUIRES: Validate(model, par).ok(),
// 0 <= rank < par.world().
std::vector<ModelShard> RankShards(const LlamaConfig& model,
                                   const Parallelism& par, int rank);

// Bytes of `shards`.
uint64_t ShardBytes(const std::vector<ModelShard>& shards);

// What DB::Save builds from a state dict holding `shards` (BuildLayout in
// engine/save/save.cc).
planner::RankSaveLayout SaveLayoutOf(const std::vector<ModelShard>& shards);

// What DB::Load targets for a state dict holding `shards` (MatchLeaves in
// engine/load/load.cc).
std::vector<planner::LoadTarget> LoadTargetsOf(
    const std::vector<ModelShard>& shards);

// The rank holding the most shard bytes (the lowest such rank): the one that
// writes, or receives, the most. Computed from the tp * pp distinct layouts
// only (DP replicas are identical), so it lies in replica 0.
int HeaviestRank(const LlamaConfig& model, const Parallelism& par);

}  // namespace ckptdb::bench
