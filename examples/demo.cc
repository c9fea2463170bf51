// The main job of the quick start: a transformer's training state (bf16
// weights, fp32 master weights and Adam moments, small values) saved by
// --save-ranks ranks (tensor-parallel pairs, replicated across data-parallel
// groups) and loaded back by --load-ranks ranks with another tensor-parallel
// split. Ranks are threads of this process over InProcessCommunicators. Every
// loaded byte is verified; a summary is printed.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckptdb/db.h"

namespace {

using ckptdb::DType;
using ckptdb::Shape;
using ckptdb::StateDict;
using ckptdb::TensorView;

// One global tensor of the training state.
struct Tensor {
  std::string key;
  DType dtype;
  Shape shape;
  int split_dim;  // tensor-parallel split dimension (-1: replicated on every
                  // rank)
  std::vector<uint8_t> bytes;
};

std::vector<Tensor> TrainingState(int64_t vocab, int64_t hidden, int layers) {
  struct Param {
    std::string name;
    Shape shape;
    int split_dim;
  };
  std::vector<Param> params = {{"embedding.weight", {vocab, hidden}, 0}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    params.push_back({p + "attn.qkv.weight", {3 * hidden, hidden}, 0});
    params.push_back({p + "attn.proj.weight", {hidden, hidden}, 1});
    params.push_back({p + "mlp.fc1.weight", {4 * hidden, hidden}, 0});
    params.push_back({p + "mlp.fc2.weight", {hidden, 4 * hidden}, 1});
    params.push_back({p + "norm.weight", {hidden}, -1});
  }
  std::vector<Tensor> state;
  std::mt19937_64 rng(42);
  auto add = [&](const std::string& key, DType dtype, const Param& p) {
    Tensor t{key, dtype, p.shape, p.split_dim, {}};
    t.bytes.resize(static_cast<size_t>(ckptdb::NumElements(p.shape)) *
                   ckptdb::DTypeSize(dtype));
    for (size_t i = 0; i + 8 <= t.bytes.size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(&t.bytes[i], &r, 8);
    }
    state.push_back(std::move(t));
  };
  for (const Param& p : params) {
    add("model." + p.name, DType::kBFloat16, p);
    for (const char* group : {"master_weights", "exp_avg", "exp_avg_sq"}) {
      add(std::string("optimizer.") + group + "." + p.name, DType::kFloat32, p);
    }
  }
  return state;
}

// Rank `part` of `parts`' box of `t` under tensor parallelism along `dim`.
void BoxOf(const Tensor& t, int dim, int part, int parts, Shape* offset,
           Shape* local) {
  *offset = Shape(t.shape.size(), 0);
  *local = t.shape;
  if (dim < 0) return;
  const int64_t n = t.shape[dim];
  (*offset)[dim] = n * part / parts;
  (*local)[dim] = n * (part + 1) / parts - (*offset)[dim];
}

// Copies the box between a whole tensor and a shard buffer (to_shard: whole ->
// shard).
void CopyShard(const Tensor& t, const Shape& offset, const Shape& local,
               uint8_t* shard, bool to_shard, size_t* mismatches = nullptr) {
  const size_t elem = ckptdb::DTypeSize(t.dtype);
  const size_t inner =
      t.shape.size() == 2
          ? static_cast<size_t>(local[1]) * elem
          : static_cast<size_t>(ckptdb::NumElements(local)) * elem;
  const int64_t rows = t.shape.size() == 2 ? local[0] : 1;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t whole_at =
        t.shape.size() == 2
            ? (static_cast<size_t>(offset[0] + r) * t.shape[1] + offset[1]) *
                  elem
            : static_cast<size_t>(offset[0]) * elem;
    uint8_t* s = shard + r * inner;
    const uint8_t* w = t.bytes.data() + whole_at;
    if (mismatches)
      *mismatches += std::memcmp(s, w, inner) != 0;
    else if (to_shard)
      std::memcpy(s, w, inner);
  }
}

void SetPath(StateDict& sd, const std::string& path, StateDict::Entry entry) {
  StateDict* dict = &sd;
  size_t start = 0, dot;
  while ((dot = path.find('.', start)) != std::string::npos) {
    dict = &dict->Child(path.substr(start, dot - start));
    start = dot + 1;
  }
  dict->items()[path.substr(start)] = std::move(entry);
}

// Runs fn(rank, comm) on `size` threads; returns the first error.
template <typename Fn>
ckptdb::Status RunRanks(int size, Fn fn) {
  auto comms = ckptdb::InProcessCommunicators(size);
  std::vector<ckptdb::Status> statuses(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { statuses[r] = fn(r, comms[r]); });
  for (auto& t : threads) t.join();
  for (auto& s : statuses) {
    if (!s.ok()) return s;
  }
  return ckptdb::Status::OK();
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

int Fail(const ckptdb::Status& s) {
  std::fprintf(stderr, "ckptdb-demo: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/ckptdb-demo";
  int64_t hidden = 512, vocab = 32000;
  int layers = 8, save_ranks = 4, load_ranks = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--dir")
      dir = argv[i + 1];
    else if (flag == "--hidden")
      hidden = std::stoll(argv[i + 1]);
    else if (flag == "--layers")
      layers = std::stoi(argv[i + 1]);
    else if (flag == "--vocab")
      vocab = std::stoll(argv[i + 1]);
    else if (flag == "--save-ranks")
      save_ranks = std::stoi(argv[i + 1]);
    else if (flag == "--load-ranks")
      load_ranks = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--dir D] [--hidden N] [--layers L] [--vocab V] "
                   "[--save-ranks N] "
                   "[--load-ranks M]\n",
                   argv[0]);
      return 2;
    }
  }
  if (save_ranks < 1 || load_ranks < 1)
    return Fail(ckptdb::Status::InvalidArgument("ranks must be >= 1"));
  std::filesystem::remove_all(dir);
  const std::vector<Tensor> state = TrainingState(vocab, hidden, layers);
  uint64_t state_bytes = 0;
  for (const Tensor& t : state) state_bytes += t.bytes.size();

  // Save: tensor parallelism of 2 (1 for a single rank), data-parallel replicas
  // of it.
  const int tp = save_ranks >= 2 ? 2 : 1;
  ckptdb::Options options;
  options.max_chunk_bytes = 8 << 20;
  ckptdb::CheckpointInfo info;
  std::mutex mu;
  double save_s = 0, load_s = 0;  // the slowest rank's time in Save / Load
  ckptdb::Status saved = RunRanks(
      save_ranks,
      [&](int rank,
          std::shared_ptr<ckptdb::Communicator> comm) -> ckptdb::Status {
        std::vector<std::vector<uint8_t>> shards;
        shards.reserve(state.size());
        StateDict sd;
        for (const Tensor& t : state) {
          Shape offset, local;
          BoxOf(t, t.split_dim, rank % tp, tp, &offset, &local);
          shards.emplace_back(static_cast<size_t>(ckptdb::NumElements(local)) *
                              ckptdb::DTypeSize(t.dtype));
          CopyShard(t, offset, local, shards.back().data(), true);
          SetPath(sd, t.key,
                  {TensorView::Shard(shards.back().data(), t.dtype, local,
                                     t.shape, offset)});
        }
        SetPath(sd, "optimizer.step", {ckptdb::Value(int64_t{1000})});
        SetPath(sd, "optimizer.lr", {ckptdb::Value(3e-4)});
        ASSIGN_OR_RETURN(auto db, ckptdb::DB::Open(options, dir, comm));
        const auto started = std::chrono::steady_clock::now();
        ASSIGN_OR_RETURN(auto result,
                         db->Save(sd, {.step = 1000, .tag = "demo"}));
        {
          std::lock_guard lock(mu);
          info = result;
          save_s = std::max(save_s, Since(started));
        }
        return db->Close();
      });
  if (!saved.ok()) return Fail(saved);

  // Load: tensor parallelism of load_ranks along the other dimension of every
  // matrix.
  std::atomic<uint64_t> read{0}, needed{0}, sent{0};
  std::atomic<size_t> mismatches{0};
  ckptdb::Status loaded = RunRanks(
      load_ranks,
      [&](int rank,
          std::shared_ptr<ckptdb::Communicator> comm) -> ckptdb::Status {
        std::vector<std::vector<uint8_t>> targets;
        std::vector<std::pair<Shape, Shape>> boxes;
        targets.reserve(state.size());
        StateDict sd;
        for (const Tensor& t : state) {
          Shape offset, local;
          BoxOf(t, t.split_dim < 0 ? -1 : 1 - t.split_dim, rank, load_ranks,
                &offset, &local);
          targets.emplace_back(static_cast<size_t>(ckptdb::NumElements(local)) *
                               ckptdb::DTypeSize(t.dtype));
          boxes.emplace_back(offset, local);
          SetPath(sd, t.key,
                  {TensorView::Shard(targets.back().data(), t.dtype, local,
                                     t.shape, offset)});
        }
        SetPath(sd, "optimizer.step", {ckptdb::Value(int64_t{0})});
        ASSIGN_OR_RETURN(auto db, ckptdb::DB::Open(options, dir, comm));
        const auto started = std::chrono::steady_clock::now();
        ASSIGN_OR_RETURN(
            auto result,
            db->Load(sd, ckptdb::CheckpointSelector::Tag("demo"), {}));
        {
          std::lock_guard lock(mu);
          load_s = std::max(load_s, Since(started));
        }
        read += result.stats.bytes_read;
        needed += result.stats.bytes_needed;
        sent += result.stats.bytes_sent;
        size_t bad = 0;
        for (size_t i = 0; i < state.size(); ++i) {
          CopyShard(state[i], boxes[i].first, boxes[i].second,
                    targets[i].data(), false, &bad);
        }
        if (std::get<int64_t>(*sd.GetChild("optimizer")->GetValue("step")) !=
            1000)
          ++bad;
        mismatches += bad;
        return db->Close();
      });
  if (!loaded.ok()) return Fail(loaded);

  auto db = ckptdb::DB::Open(options, dir);
  if (!db.ok()) return Fail(db.status());
  auto verified = (*db)->Verify(ckptdb::CheckpointSelector::Tag("demo"));
  if (!verified.ok()) return Fail(verified);
  auto meta = (*db)->GetMetadata(ckptdb::CheckpointSelector::Tag("demo"));
  if (!meta.ok()) return Fail(meta.status());
  size_t chunks = 0;
  for (const auto& [key, t] : meta->tensors) chunks += t.chunks.size();

  const double gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
  std::printf("ckptdb demo: store %s (ranks are threads of one process)\n",
              dir.c_str());
  std::printf(
      "  state   %zu tensors (%d layers, hidden %lld): bf16 weights, fp32 "
      "master weights and Adam moments, %.1f MiB\n",
      state.size(), layers, static_cast<long long>(hidden), state_bytes / mib);
  std::printf(
      "  save    %d ranks (tensor-parallel %d x data-parallel %d): id %lld, "
      "%.1f MiB stored once in %zu chunks, %.2f s, %.2f GiB/s\n",
      save_ranks, tp, save_ranks / tp, static_cast<long long>(info.id),
      info.nbytes / mib, chunks, save_s, info.nbytes / gib / save_s);
  std::printf(
      "  load    %d ranks (tensor-parallel %d, the other dimension): %.2f s, "
      "%.2f GiB/s\n",
      load_ranks, load_ranks, load_s, needed.load() / gib / load_s);
  std::printf(
      "  bytes   read %.1f MiB, needed %.1f MiB (read/needed %.3f), sent "
      "between ranks %.1f MiB\n",
      read.load() / mib, needed.load() / mib,
      needed ? static_cast<double>(read) / needed : 0.0, sent.load() / mib);
  std::printf("  verify  %s; every chunk checksum ok\n",
              mismatches == 0 ? "every loaded byte matches the saved state"
                              : "MISMATCH");
  return mismatches == 0 ? 0 : 1;
}
