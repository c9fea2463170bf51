// The main job of the quick start, an MPI program run in two mpirun jobs:
//
//   mpirun -np 4 ckptdb-demo save --dir D   # tensor-parallel 2 x data-parallel
//   2 mpirun -np 3 ckptdb-demo load --dir D   # tensor-parallel 3 along the
//   other dim
//
// The state is a transformer's training state: bf16 weights, fp32 master
// weights and Adam moments, small values. Every rank generates only its own
// shards (each byte a function of its tensor and position), so a load verifies
// every byte it receives without a copy of the whole state. Rank 0 prints a
// summary: sizes, the slowest rank's time, GiB/s, bytes read vs needed.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ckptdb/db.h"
#include "ckptdb/mpi.h"

namespace {

using ckptdb::DType;
using ckptdb::Shape;
using ckptdb::StateDict;
using ckptdb::TensorView;

// One global tensor of the training state.
struct Param {
  std::string key;
  DType dtype;
  Shape shape;    // 1-D or 2-D
  int split_dim;  // tensor-parallel split dimension (-1: replicated)
};

std::vector<Param> TrainingState(int64_t vocab, int64_t hidden, int layers) {
  std::vector<Param> params = {{"embedding.weight", {}, {vocab, hidden}, 0}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    params.push_back({p + "attn.qkv.weight", {}, {3 * hidden, hidden}, 0});
    params.push_back({p + "attn.proj.weight", {}, {hidden, hidden}, 1});
    params.push_back({p + "mlp.fc1.weight", {}, {4 * hidden, hidden}, 0});
    params.push_back({p + "mlp.fc2.weight", {}, {hidden, 4 * hidden}, 1});
    params.push_back({p + "norm.weight", {}, {hidden}, -1});
  }
  std::vector<Param> state;
  for (const Param& p : params) {
    state.push_back({"model." + p.key, DType::kBFloat16, p.shape, p.split_dim});
    for (const char* group : {"master_weights", "exp_avg", "exp_avg_sq"}) {
      state.push_back({std::string("optimizer.") + group + "." + p.key,
                       DType::kFloat32, p.shape, p.split_dim});
    }
  }
  return state;
}

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A shard of `p`: its box under tensor parallelism `parts` along `dim`, and
// its bytes, generated from the tensor's key and each element's position.
struct Shard {
  Shape offset, local;
  std::vector<uint8_t> bytes;

  Shard(const Param& p, int dim, int part, int parts)
      : offset(p.shape.size(), 0), local(p.shape) {
    if (dim >= 0) {
      const int64_t n = p.shape[dim];
      offset[dim] = n * part / parts;
      local[dim] = n * (part + 1) / parts - offset[dim];
    }
    bytes.resize(static_cast<size_t>(ckptdb::NumElements(local)) *
                 ckptdb::DTypeSize(p.dtype));
  }

  // Fills (or, with `check`, counts elements differing from) the expected
  // bytes.
  size_t Generate(const Param& p, bool check) {
    const uint64_t seed = std::hash<std::string>()(p.key);
    const size_t elem = ckptdb::DTypeSize(p.dtype);
    const int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
    const int64_t rows = p.shape.size() == 2 ? local[0] : 1;
    const int64_t width = p.shape.size() == 2 ? local[1] : local[0];
    size_t bad = 0;
    uint8_t* at = bytes.data();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t first =
          p.shape.size() == 2 ? (offset[0] + r) * cols + offset[1] : offset[0];
      for (int64_t c = 0; c < width; ++c, at += elem) {
        const uint64_t v = Mix(seed ^ static_cast<uint64_t>(first + c));
        if (check) {
          bad += std::memcmp(at, &v, elem) != 0;
        } else {
          std::memcpy(at, &v, elem);
        }
      }
    }
    return bad;
  }

  TensorView View(const Param& p) {
    return TensorView::Shard(bytes.data(), p.dtype, local, p.shape, offset);
  }
};

void SetPath(StateDict& sd, const std::string& path, StateDict::Entry entry) {
  StateDict* dict = &sd;
  size_t start = 0, dot;
  while ((dot = path.find('.', start)) != std::string::npos) {
    dict = &dict->Child(path.substr(start, dot - start));
    start = dot + 1;
  }
  dict->items()[path.substr(start)] = std::move(entry);
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

uint64_t Sum(uint64_t v) {
  uint64_t total = 0;
  MPI_Allreduce(&v, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

double Max(double v) {
  double most = 0;
  MPI_Allreduce(&v, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

// This process's peak resident memory.
double PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

constexpr double kMiB = 1024.0 * 1024, kGiB = kMiB * 1024;

int Save(const std::vector<Param>& state, ckptdb::DB& db, int rank, int size) {
  const int tp = size >= 2 ? 2 : 1;
  std::vector<Shard> shards;
  shards.reserve(state.size());
  StateDict sd;
  uint64_t held = 0;
  for (const Param& p : state) {
    Shard& s = shards.emplace_back(p, p.split_dim, rank % tp, tp);
    s.Generate(p, false);
    held += s.bytes.size();
    SetPath(sd, p.key, {s.View(p)});
  }
  SetPath(sd, "optimizer.step", {ckptdb::Value(int64_t{1000})});
  SetPath(sd, "optimizer.lr", {ckptdb::Value(3e-4)});
  // A rerun replaces the previous run's checkpoint (tags are unique).
  ckptdb::Status deleted = db.Delete(ckptdb::CheckpointSelector::Tag("demo"));
  if (!deleted.ok() && !deleted.IsNotFound()) {
    std::fprintf(stderr, "ckptdb-demo rank %d: %s\n", rank,
                 deleted.ToString().c_str());
    return 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto started = std::chrono::steady_clock::now();
  auto info = db.Save(sd, {.step = 1000, .tag = "demo"});
  const double seconds = Max(Seconds(started));
  if (!info.ok()) {
    std::fprintf(stderr, "ckptdb-demo rank %d: save failed: %s\n", rank,
                 info.status().ToString().c_str());
    return 1;
  }
  const uint64_t held_total = Sum(held);
  if (rank == 0) {
    auto meta = db.GetMetadata(ckptdb::CheckpointSelector::Id(info->id));
    size_t chunks = 0;
    if (meta.ok()) {
      for (const auto& [key, t] : meta->tensors) chunks += t.chunks.size();
    }
    std::printf(
        "  save    %d ranks (tensor-parallel %d x data-parallel %d) held %.1f "
        "MiB: "
        "id %lld, %.1f MiB stored once in %zu chunks, %.2f s, %.2f GiB/s\n",
        size, tp, size / tp, held_total / kMiB,
        static_cast<long long>(info->id), info->nbytes / kMiB, chunks, seconds,
        info->nbytes / kGiB / seconds);
  }
  return 0;
}

int Load(const std::vector<Param>& state, ckptdb::DB& db, int rank, int size) {
  std::vector<Shard> targets;
  targets.reserve(state.size());
  StateDict sd;
  for (const Param& p : state) {
    const int dim =
        p.split_dim < 0 ? -1 : 1 - p.split_dim;  // the other dimension
    Shard& t =
        targets.emplace_back(p, p.shape.size() == 2 ? dim : -1, rank, size);
    SetPath(sd, p.key, {t.View(p)});
  }
  SetPath(sd, "optimizer.step", {ckptdb::Value(int64_t{0})});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto started = std::chrono::steady_clock::now();
  auto result = db.Load(sd, ckptdb::CheckpointSelector::Tag("demo"), {});
  const double seconds = Max(Seconds(started));
  if (!result.ok()) {
    std::fprintf(stderr, "ckptdb-demo rank %d: load failed: %s\n", rank,
                 result.status().ToString().c_str());
    return 1;
  }
  uint64_t held = 0;
  for (const Shard& t : targets) held += t.bytes.size();
  const double held_max = Max(held / kMiB), rss_max = Max(PeakRssMiB());
  size_t bad = 0;
  for (size_t i = 0; i < state.size(); ++i)
    bad += targets[i].Generate(state[i], true);
  if (std::get<int64_t>(*sd.GetChild("optimizer")->GetValue("step")) != 1000)
    ++bad;
  const uint64_t read = Sum(result->stats.bytes_read),
                 needed = Sum(result->stats.bytes_needed),
                 sent = Sum(result->stats.bytes_sent),
                 chunks = Sum(result->stats.chunks_read);
  bad = Sum(bad);
  if (rank == 0) {
    std::printf(
        "  load    %d ranks (tensor-parallel %d along the other dimension): "
        "%.2f s, %.2f GiB/s\n",
        size, size, seconds, needed / kGiB / seconds);
    std::printf(
        "  bytes   read %.1f MiB in %llu chunks (each once, checksums "
        "verified), needed %.1f MiB "
        "(read/needed %.3f), sent between ranks %.1f MiB\n",
        read / kMiB, static_cast<unsigned long long>(chunks), needed / kMiB,
        needed ? static_cast<double>(read) / needed : 0.0, sent / kMiB);
    std::printf(
        "  memory  peak resident %.1f MiB on the largest rank, whose targets "
        "are %.1f MiB\n",
        rss_max, held_max);
    std::printf("  verify  %s\n",
                bad == 0
                    ? "every loaded byte matches the saved state"
                    : "MISMATCH: loaded bytes differ from the saved state");
  }
  return bad == 0 ? 0 : 1;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: mpirun -np N %s save|load [--dir D] [--hidden H] "
               "[--layers L] [--vocab V]\n"
               "  save: N ranks (tensor-parallel 2 x data-parallel N/2) save "
               "the state as tag 'demo'\n"
               "  load: N ranks load tag 'demo', split N ways along the other "
               "dimension\n",
               argv0);
  return 2;
}

// The command line: a phase (save or load) and the model's size.
struct Arguments {
  std::string phase;
  std::string dir = "/tmp/ckptdb-demo";
  int64_t hidden = 512, vocab = 32000;
  int layers = 8;
};

// Parses argv; false on a bad command line.
bool Parse(int argc, char** argv, Arguments* a) {
  a->phase = argc > 1 ? argv[1] : "";
  if (a->phase != "save" && a->phase != "load") return false;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    if (flag == "--dir") {
      a->dir = argv[i + 1];
    } else if (flag == "--hidden") {
      a->hidden = std::stoll(argv[i + 1]);
    } else if (flag == "--layers") {
      a->layers = std::stoi(argv[i + 1]);
    } else if (flag == "--vocab") {
      a->vocab = std::stoll(argv[i + 1]);
    } else {
      return false;
    }
  }
  return true;
}

void PrintState(const Arguments& a, const std::vector<Param>& state, int size) {
  uint64_t bytes = 0;
  for (const Param& p : state) {
    bytes += static_cast<uint64_t>(ckptdb::NumElements(p.shape)) *
             ckptdb::DTypeSize(p.dtype);
  }
  std::printf("ckptdb demo: store %s, %d MPI ranks\n", a.dir.c_str(), size);
  std::printf(
      "  state   %zu tensors (%d layers, hidden %lld): bf16 weights, "
      "fp32 master "
      "weights and Adam moments, %.1f MiB\n",
      state.size(), a.layers, static_cast<long long>(a.hidden), bytes / kMiB);
}

// Opens the store on every rank and runs the phase; this rank's exit status.
int Run(const Arguments& a, int rank, int size) {
  const std::vector<Param> state = TrainingState(a.vocab, a.hidden, a.layers);
  auto comm = ckptdb::MpiCommunicator(MPI_COMM_WORLD);
  ckptdb::Options options;
  options.max_chunk_bytes = 8 << 20;
  auto db = comm.ok() ? ckptdb::DB::Open(options, a.dir, *comm) : comm.status();
  if (!db.ok()) {
    std::fprintf(stderr, "ckptdb-demo rank %d: %s\n", rank,
                 db.status().ToString().c_str());
    return 1;
  }
  if (rank == 0 && a.phase == "save") PrintState(a, state, size);
  int rc = a.phase == "save" ? Save(state, **db, rank, size)
                             : Load(state, **db, rank, size);
  if (!(*db)->Close().ok()) rc = 1;
  return rc;
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Arguments a;
  if (!Parse(argc, argv, &a)) {
    if (rank == 0) Usage(argv[0]);
    MPI_Finalize();
    return 2;
  }
  int rc = Run(a, rank, size);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
