#include "bench/llama_model.h"

#include <algorithm>
#include <cassert>

namespace ckptdb::bench {
namespace {

// How a parameter is split over TP: along one dimension, or replicated.
enum class Split { kDim0, kDim1, kReplicated };

// Which stages hold a parameter.
enum class Stage { kLayer, kFirst, kLast };

// One parameter (its four tensors are sharded alike).
struct Param {
  planner::Path path;  // below "model" / "optim.<state>"
  Shape shape;
  Split split;
  Stage stage;
  int layer = -1;  // Stage::kLayer only
};

// The per-layer parameters of layer `layer`.
void LayerParams(const LlamaConfig& m, int layer, std::vector<Param>* out) {
  const int64_t head_dim = m.hidden / m.heads;
  const int64_t q_rows = m.heads * head_dim;
  const int64_t kv_rows = m.kv_heads * head_dim;
  const std::string l = std::to_string(layer);
  auto add = [&](std::string group, std::string name, Shape shape,
                 Split split) {
    out->push_back({{"layers", l, std::move(group), std::move(name)},
                    std::move(shape),
                    split,
                    Stage::kLayer,
                    layer});
  };
  add("attention", "q", {q_rows, m.hidden}, Split::kDim0);
  add("attention", "k", {kv_rows, m.hidden}, Split::kDim0);
  add("attention", "v", {kv_rows, m.hidden}, Split::kDim0);
  add("attention", "o", {m.hidden, q_rows}, Split::kDim1);
  add("mlp", "gate", {m.ffn, m.hidden}, Split::kDim0);
  add("mlp", "up", {m.ffn, m.hidden}, Split::kDim0);
  add("mlp", "down", {m.hidden, m.ffn}, Split::kDim1);
  add("norm", "attention", {m.hidden}, Split::kReplicated);
  add("norm", "ffn", {m.hidden}, Split::kReplicated);
}

std::vector<Param> AllParams(const LlamaConfig& m) {
  std::vector<Param> params;
  params.push_back(
      {{"embedding"}, {m.vocab, m.hidden}, Split::kDim0, Stage::kFirst});
  for (int layer = 0; layer < m.layers; ++layer) LayerParams(m, layer, &params);
  params.push_back(
      {{"lm_head"}, {m.vocab, m.hidden}, Split::kDim0, Stage::kLast});
  params.push_back(
      {{"final_norm"}, {m.hidden}, Split::kReplicated, Stage::kLast});
  return params;
}

// The four tensors of a parameter: (prefix path, dtype).
struct StateKind {
  planner::Path prefix;
  DType dtype;
};
const std::vector<StateKind>& StateKinds() {
  static const std::vector<StateKind> kinds = {
      {{"model"}, DType::kBFloat16},
      {{"optim", "master"}, DType::kFloat32},
      {{"optim", "exp_avg"}, DType::kFloat32},
      {{"optim", "exp_avg_sq"}, DType::kFloat32},
  };
  return kinds;
}

bool OnStage(const Param& p, int pp, int stage, std::pair<int, int> layers) {
  switch (p.stage) {
    case Stage::kFirst:
      return stage == 0;
    case Stage::kLast:
      return stage == pp - 1;
    case Stage::kLayer:
      return p.layer >= layers.first && p.layer < layers.second;
  }
  return false;
}

// Rank `index` of `parts`' piece of a dimension of `n`: {offset, extent}.
std::pair<int64_t, int64_t> SplitDim(int64_t n, int parts, int index) {
  const int64_t step = (n + parts - 1) / parts;
  const int64_t begin = std::min(n, step * index);
  const int64_t end = std::min(n, begin + step);
  return {begin, end - begin};
}

// `p`'s box on TP rank `tp_index` of `tp`.
planner::Box ParamBox(const Param& p, int tp, int tp_index) {
  planner::Box box{Shape(p.shape.size(), 0), p.shape};
  if (p.split == Split::kReplicated) return box;
  const size_t dim = p.split == Split::kDim0 ? 0 : 1;
  std::tie(box.origin[dim], box.shape[dim]) =
      SplitDim(p.shape[dim], tp, tp_index);
  return box;
}

ModelTensor TensorOf(const Param& p, const StateKind& kind) {
  planner::Path path = kind.prefix;
  path.insert(path.end(), p.path.begin(), p.path.end());
  std::string key = planner::JoinPath(path);
  return {std::move(key), std::move(path), kind.dtype, p.shape};
}

}  // namespace

int RankOf(const Parallelism& par, const RankCoords& c) {
  return c.dp_index * (par.tp * par.pp) + c.pp_index * par.tp + c.tp_index;
}

RankCoords CoordsOf(const Parallelism& par, int rank) {
  assert(rank >= 0 && rank < par.world());
  return {rank % par.tp, (rank / par.tp) % par.pp, rank / (par.tp * par.pp)};
}

Status Validate(const LlamaConfig& m, const Parallelism& par) {
  auto positive = [](int64_t v, const char* name) {
    return v > 0 ? Status::OK()
                 : Status::InvalidArgument(std::string(name) +
                                           " must be positive, not " +
                                           std::to_string(v));
  };
  CKPTDB_RETURN_IF_ERROR(positive(m.layers, "layers"));
  CKPTDB_RETURN_IF_ERROR(positive(m.hidden, "hidden"));
  CKPTDB_RETURN_IF_ERROR(positive(m.ffn, "ffn"));
  CKPTDB_RETURN_IF_ERROR(positive(m.vocab, "vocab"));
  CKPTDB_RETURN_IF_ERROR(positive(m.heads, "heads"));
  CKPTDB_RETURN_IF_ERROR(positive(m.kv_heads, "kv_heads"));
  CKPTDB_RETURN_IF_ERROR(positive(par.tp, "tp"));
  CKPTDB_RETURN_IF_ERROR(positive(par.pp, "pp"));
  CKPTDB_RETURN_IF_ERROR(positive(par.dp, "dp"));
  if (m.hidden % m.heads != 0) {
    return Status::InvalidArgument("hidden " + std::to_string(m.hidden) +
                                   " does not divide by heads " +
                                   std::to_string(m.heads));
  }
  if (par.pp > m.layers) {
    return Status::InvalidArgument("pp " + std::to_string(par.pp) +
                                   " is more than the layers " +
                                   std::to_string(m.layers));
  }
  if (int64_t{par.tp} * par.pp * par.dp > (int64_t{1} << 30))
    return Status::InvalidArgument("tp * pp * dp is over 2^30 ranks");
  return Status::OK();
}

std::pair<int, int> StageLayers(int layers, int pp, int stage) {
  assert(stage >= 0 && stage < pp && pp <= layers);
  const int base = (layers + pp - 1) / pp;
  const int deficit = base * pp - layers;  // < pp
  // Stage s lacks a layer when its position in the order first, last, second,
  // second to last, ... is below the deficit.
  auto order = [&](int s) {
    const int from_end = std::min(s, pp - 1 - s);
    return 2 * from_end + (s == from_end ? 0 : 1);
  };
  int first = 0;
  for (int s = 0; s < stage; ++s) first += base - (order(s) < deficit);
  return {first, first + base - (order(stage) < deficit)};
}

std::vector<ModelTensor> ModelTensors(const LlamaConfig& model) {
  std::vector<ModelTensor> tensors;
  for (const Param& p : AllParams(model)) {
    for (const StateKind& kind : StateKinds())
      tensors.push_back(TensorOf(p, kind));
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const ModelTensor& a, const ModelTensor& b) {
              return a.flat_key < b.flat_key;
            });
  return tensors;
}

std::vector<ModelShard> RankShards(const LlamaConfig& model,
                                   const Parallelism& par, int rank) {
  const RankCoords c = CoordsOf(par, rank);
  const auto layers = StageLayers(model.layers, par.pp, c.pp_index);
  std::vector<ModelShard> shards;
  for (const Param& p : AllParams(model)) {
    if (!OnStage(p, par.pp, c.pp_index, layers)) continue;
    planner::Box box = ParamBox(p, par.tp, c.tp_index);
    if (box.volume() == 0) continue;
    for (const StateKind& kind : StateKinds())
      shards.push_back({TensorOf(p, kind), box});
  }
  std::sort(shards.begin(), shards.end(),
            [](const ModelShard& a, const ModelShard& b) {
              return a.tensor.flat_key < b.tensor.flat_key;
            });
  return shards;
}

uint64_t ShardBytes(const std::vector<ModelShard>& shards) {
  uint64_t bytes = 0;
  for (const ModelShard& s : shards) bytes += s.nbytes();
  return bytes;
}

planner::RankSaveLayout SaveLayoutOf(const std::vector<ModelShard>& shards) {
  planner::RankSaveLayout layout;
  layout.shards.reserve(shards.size());
  for (const ModelShard& s : shards) {
    layout.shards.push_back({s.tensor.flat_key, s.tensor.path, s.tensor.dtype,
                             s.tensor.global_shape, s.box});
  }
  return layout;
}

std::vector<planner::LoadTarget> LoadTargetsOf(
    const std::vector<ModelShard>& shards) {
  std::vector<planner::LoadTarget> targets;
  targets.reserve(shards.size());
  for (const ModelShard& s : shards)
    targets.push_back({s.tensor.flat_key, s.box});
  return targets;
}

int HeaviestRank(const LlamaConfig& model, const Parallelism& par) {
  int best = 0;
  uint64_t best_bytes = 0;
  for (int rank = 0; rank < par.tp * par.pp; ++rank) {
    const uint64_t bytes = ShardBytes(RankShards(model, par, rank));
    if (bytes > best_bytes) {
      best = rank;
      best_bytes = bytes;
    }
  }
  return best;
}

}  // namespace ckptdb::bench
