// The main job of the quick start: saves a transformer's training state (bf16 weights, fp32
// master weights and Adam moments, small values) and loads it back resharded: every weight is
// split over --load-ranks tensor-parallel ranks (column shards for the first matrix of a block,
// row shards for the second), one rank's targets at a time. Verifies every byte and prints a
// summary.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckptdb/db.h"

namespace {

using ckptdb::DType;
using ckptdb::Shape;
using ckptdb::StateDict;
using ckptdb::TensorView;

struct Param {
  std::string name;
  Shape shape;
  int split_dim;  // dimension a tensor-parallel load shards it along (-1: replicated)
};

std::vector<Param> Model(int64_t vocab, int64_t hidden, int layers) {
  std::vector<Param> params = {{"embedding.weight", {vocab, hidden}, 0}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    params.push_back({p + "attn.qkv.weight", {3 * hidden, hidden}, 0});
    params.push_back({p + "attn.proj.weight", {hidden, hidden}, 1});
    params.push_back({p + "mlp.fc1.weight", {4 * hidden, hidden}, 0});
    params.push_back({p + "mlp.fc2.weight", {hidden, 4 * hidden}, 1});
    params.push_back({p + "norm.weight", {hidden}, -1});
  }
  return params;
}

// A host buffer with random contents.
struct Buffer {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
  Buffer(DType t, Shape s) : dtype(t), shape(std::move(s)) {
    bytes.resize(static_cast<size_t>(ckptdb::NumElements(shape)) * ckptdb::DTypeSize(t));
  }
};

// Sets `path` (dot-separated) in a nested state dict.
void SetPath(StateDict& sd, const std::string& path, ckptdb::StateDict::Entry entry) {
  StateDict* dict = &sd;
  size_t start = 0, dot;
  while ((dot = path.find('.', start)) != std::string::npos) {
    dict = &dict->Child(path.substr(start, dot - start));
    start = dot + 1;
  }
  dict->items()[path.substr(start)] = std::move(entry);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

int Fail(const ckptdb::Status& s) {
  std::fprintf(stderr, "ckptdb-demo: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/ckptdb-demo";
  int64_t hidden = 512, vocab = 32000;
  int layers = 8, load_ranks = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--hidden") hidden = std::stoll(argv[i + 1]);
    else if (flag == "--layers") layers = std::stoi(argv[i + 1]);
    else if (flag == "--vocab") vocab = std::stoll(argv[i + 1]);
    else if (flag == "--load-ranks") load_ranks = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--dir D] [--hidden N] [--layers L] [--vocab V] [--load-ranks M]\n", argv[0]);
      return 2;
    }
  }
  std::filesystem::remove_all(dir);

  // Training state: bf16 model weights; fp32 master weights and Adam moments; small values.
  const auto params = Model(vocab, hidden, layers);
  std::mt19937_64 rng(42);
  std::vector<std::pair<std::string, Buffer>> state;
  for (const Param& p : params) {
    state.emplace_back("model." + p.name, Buffer(DType::kBFloat16, p.shape));
    for (const char* group : {"master_weights", "exp_avg", "exp_avg_sq"}) {
      state.emplace_back(std::string("optimizer.") + group + "." + p.name, Buffer(DType::kFloat32, p.shape));
    }
  }
  uint64_t total_bytes = 0;
  for (auto& [key, buf] : state) {
    for (size_t i = 0; i + 8 <= buf.bytes.size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(&buf.bytes[i], &r, 8);
    }
    total_bytes += buf.bytes.size();
  }
  StateDict sd;
  for (auto& [key, buf] : state) {
    SetPath(sd, key, {TensorView::Whole(buf.bytes.data(), buf.dtype, buf.shape)});
  }
  SetPath(sd, "optimizer.step", {ckptdb::Value(int64_t{1000})});
  SetPath(sd, "optimizer.lr", {ckptdb::Value(3e-4)});
  SetPath(sd, "config.name", {ckptdb::Value(std::string("demo-gpt"))});

  ckptdb::Options options;
  options.max_chunk_bytes = 8 << 20;
  auto db = ckptdb::DB::Open(options, dir);
  if (!db.ok()) return Fail(db.status());
  auto t0 = std::chrono::steady_clock::now();
  auto info = (*db)->Save(sd, {.step = 1000, .tag = "demo"});
  if (!info.ok()) return Fail(info.status());
  const double save_s = Seconds(t0);

  // Resharded load: each of the load ranks' targets in turn.
  uint64_t read = 0, needed = 0, mismatches = 0;
  t0 = std::chrono::steady_clock::now();
  for (int rank = 0; rank < load_ranks; ++rank) {
    std::vector<std::pair<std::string, Buffer>> shards;
    std::vector<std::pair<const Buffer*, Shape>> sources;  // (whole tensor, shard offset)
    StateDict target;
    for (auto& [key, whole] : state) {
      int split = -1;
      for (const Param& q : params) {
        if (key.size() >= q.name.size() && key.compare(key.size() - q.name.size(), q.name.size(), q.name) == 0) split = q.split_dim;
      }
      Shape local = whole.shape, offset(whole.shape.size(), 0);
      if (split >= 0) {
        const int64_t n = whole.shape[split];
        offset[split] = n * rank / load_ranks;
        local[split] = n * (rank + 1) / load_ranks - offset[split];
      }
      shards.emplace_back(key, Buffer(whole.dtype, local));
      sources.emplace_back(&whole, offset);
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      Buffer& buf = shards[i].second;
      SetPath(target, shards[i].first,
              {TensorView::Shard(buf.bytes.data(), buf.dtype, buf.shape, sources[i].first->shape, sources[i].second)});
    }
    SetPath(target, "optimizer.step", {ckptdb::Value(int64_t{0})});
    auto result = (*db)->Load(target, ckptdb::CheckpointSelector::Tag("demo"), {});
    if (!result.ok()) return Fail(result.status());
    read += result->stats.bytes_read;
    needed += result->stats.bytes_needed;
    // Verify every byte of every shard against the saved tensors.
    for (size_t i = 0; i < shards.size(); ++i) {
      const Buffer& buf = shards[i].second;
      const Buffer& whole = *sources[i].first;
      const Shape& off = sources[i].second;
      const size_t elem = ckptdb::DTypeSize(buf.dtype);
      if (buf.shape.size() == 1) {
        mismatches += std::memcmp(buf.bytes.data(), whole.bytes.data() + off[0] * elem, buf.bytes.size()) != 0;
        continue;
      }
      const size_t row = static_cast<size_t>(buf.shape[1]) * elem;
      const size_t whole_row = static_cast<size_t>(whole.shape[1]) * elem;
      for (int64_t r = 0; r < buf.shape[0]; ++r) {
        mismatches += std::memcmp(buf.bytes.data() + r * row,
                                  whole.bytes.data() + (off[0] + r) * whole_row + off[1] * elem, row) != 0;
      }
    }
    if (std::get<int64_t>(*target.GetChild("optimizer")->GetValue("step")) != 1000) ++mismatches;
  }
  const double load_s = Seconds(t0);
  auto verified = (*db)->Verify(ckptdb::CheckpointSelector::Tag("demo"));
  if (!verified.ok()) return Fail(verified);
  auto meta = (*db)->GetMetadata(ckptdb::CheckpointSelector::Tag("demo"));
  if (!meta.ok()) return Fail(meta.status());
  size_t chunks = 0;
  for (const auto& [key, t] : meta->tensors) chunks += t.chunks.size();

  const double gib = 1024.0 * 1024 * 1024;
  std::printf("ckptdb demo: store %s\n", dir.c_str());
  std::printf("  state          %zu tensors (%d layers, hidden %lld), %.1f MiB, %zu chunks\n",
              state.size(), layers, static_cast<long long>(hidden), total_bytes / 1048576.0, chunks);
  std::printf("  save           checkpoint id %lld step %lld tag 'demo': %.2f s, %.2f GiB/s\n",
              static_cast<long long>(info->id), static_cast<long long>(*info->step), save_s,
              total_bytes / gib / save_s);
  std::printf("  resharded load %d tensor-parallel ranks (rows/columns): %.2f s, %.2f GiB/s of targets\n",
              load_ranks, load_s, needed / gib / load_s);
  std::printf("  bytes          read %.1f MiB, needed %.1f MiB (read/needed %.3f)\n", read / 1048576.0,
              needed / 1048576.0, needed ? static_cast<double>(read) / needed : 0.0);
  std::printf("  verify         %s; checksums of all chunks ok\n",
              mismatches == 0 ? "every loaded byte matches" : "MISMATCH");
  return mismatches == 0 ? 0 : 1;
}
