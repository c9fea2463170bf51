// ckpt-gpu-bench: device save and load throughput against plain pinned
// cudaMemcpy of the same bytes (device -> pinned host for save, pinned host ->
// device for load), and against the same copies with the bytes written to a
// file beside the store (write + fsync) and read back from it (pread), one
// process, one GPU.
//
//   build/bench/ckpt-gpu-bench --dir /dev/shm/gpu-bench --size 2G
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ckptdb/db.h"

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "ckpt-gpu-bench: %s: %s\n", what,
                 cudaGetErrorString(e));
    std::exit(2);
  }
}

void Check(const ckptdb::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "ckpt-gpu-bench: %s: %s\n", what,
                 s.ToString().c_str());
    std::exit(2);
  }
}

// The bench's memory: each tensor's bytes on the device, the buffers loads
// land in, and one pinned host buffer of a tensor's size for the baselines.
struct Buffers {
  const std::vector<void*>& device;
  const std::vector<void*>& target;
  void* pinned;
  size_t per;  // bytes of each tensor
};

// The bytes through the pinned buffer: device -> pinned for each tensor, or
// pinned -> each target.
double CopyAll(const Buffers& b, cudaMemcpyKind kind) {
  const double start = Now();
  for (size_t t = 0; t < b.device.size(); ++t) {
    if (kind == cudaMemcpyDeviceToHost)
      Check(cudaMemcpy(b.pinned, b.device[t], b.per, kind), "cudaMemcpy");
    else
      Check(cudaMemcpy(b.target[t], b.pinned, b.per, kind), "cudaMemcpy");
  }
  return Now() - start;
}

// The same copies through a plain file: each tensor copied to the pinned
// buffer and written, then fsync.
double FileSave(const Buffers& b, const std::string& file) {
  ::unlink(file.c_str());  // untimed, as the store deletes its last one
  const double start = Now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::exit(2);
  for (void* tensor : b.device) {
    Check(cudaMemcpy(b.pinned, tensor, b.per, cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    if (::write(fd, b.pinned, b.per) != static_cast<ssize_t>(b.per))
      std::exit(2);
  }
  if (::fsync(fd) != 0) std::exit(2);
  ::close(fd);
  return Now() - start;
}

// Each tensor read back from FileSave's file into the pinned buffer and copied
// to its target.
double FileLoad(const Buffers& b, const std::string& file) {
  const double start = Now();
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) std::exit(2);
  for (size_t t = 0; t < b.target.size(); ++t) {
    if (::pread(fd, b.pinned, b.per, static_cast<off_t>(b.per * t)) !=
        static_cast<ssize_t>(b.per))
      std::exit(2);
    Check(cudaMemcpy(b.target[t], b.pinned, b.per, cudaMemcpyHostToDevice),
          "cudaMemcpy");
  }
  ::close(fd);
  return Now() - start;
}

// Whether every target's first and last 4 KiB hold its tensor's byte (t + 1);
// read right after each load, as the H2D baselines write over the targets.
bool LoadedRight(const Buffers& b) {
  std::vector<unsigned char> probe(4096);
  for (size_t t = 0; t < b.target.size(); ++t) {
    for (size_t at : {size_t{0}, b.per - probe.size()}) {
      Check(cudaMemcpy(probe.data(), static_cast<char*>(b.target[t]) + at,
                       probe.size(), cudaMemcpyDeviceToHost),
            "check");
      for (unsigned char byte : probe) {
        if (byte != static_cast<unsigned char>(t + 1)) return false;
      }
    }
  }
  return true;
}

// A state dict of `buffers` (float32 device tensors "t0", "t1", ... of
// `per` bytes each).
ckptdb::StateDict DeviceStateDict(const std::vector<void*>& buffers,
                                  size_t per) {
  ckptdb::StateDict state;
  const ckptdb::Shape shape{static_cast<int64_t>(per / 4)};
  for (size_t t = 0; t < buffers.size(); ++t) {
    state.Set("t" + std::to_string(t),
              ckptdb::TensorView::Whole(buffers[t], ckptdb::DType::kFloat32,
                                        shape, {ckptdb::DeviceType::kCUDA, 0}));
  }
  return state;
}

// The best seconds of each timed step over the runs.
struct Best {
  double save = 1e30, load = 1e30, d2h = 1e30, h2d = 1e30;
  double file_save = 1e30, file_load = 1e30;
};

// The table: ckptdb's save and load against each baseline, in GiB/s and as
// baseline seconds over ckptdb's.
void PrintTable(double total, const Best& best, bool ok) {
  std::printf("%-6s %10s %9s %18s %9s %7s\n", "phase", "GiB", "seconds",
              "baseline", "base GiB/s", "ratio");
  std::printf("%-6s %10.2f %9.3f %18s %9.2f %7.2f  (%.2f GiB/s)\n", "save",
              total / kGiB, best.save, "cudaMemcpy D2H",
              total / kGiB / best.d2h, best.d2h / best.save,
              total / kGiB / best.save);
  std::printf("%-6s %10.2f %9.3f %18s %9.2f %7.2f  (%.2f GiB/s)  %s\n", "load",
              total / kGiB, best.load, "cudaMemcpy H2D",
              total / kGiB / best.h2d, best.h2d / best.load,
              total / kGiB / best.load, ok ? "bytes checked" : "BYTES WRONG");
  std::printf("%-6s %10.2f %9.3f %18s %9.2f %7.2f\n", "save", total / kGiB,
              best.save, "D2H + write+fsync", total / kGiB / best.file_save,
              best.file_save / best.save);
  std::printf("%-6s %10.2f %9.3f %18s %9.2f %7.2f\n", "load", total / kGiB,
              best.load, "pread + H2D", total / kGiB / best.file_load,
              best.file_load / best.load);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double gib = 2;
  int tensors = 64, repeat = 3;
  CLI::App app{"ckpt-gpu-bench: device save/load vs pinned cudaMemcpy"};
  app.add_option("--dir", dir, "store directory")->required();
  app.add_option("--gib", gib, "state size in GiB")->capture_default_str();
  app.add_option("--tensors", tensors)->capture_default_str();
  app.add_option("--repeat", repeat)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("ckpt-gpu-bench: no CUDA device, nothing measured\n");
    return 0;
  }
  const size_t per = static_cast<size_t>(gib * kGiB / tensors) / 4096 * 4096;
  const size_t total = per * tensors;
  std::vector<void*> device(tensors), target(tensors);
  for (int t = 0; t < tensors; ++t) {
    Check(cudaMalloc(&device[t], per), "cudaMalloc");
    Check(cudaMalloc(&target[t], per), "cudaMalloc");
    Check(cudaMemset(device[t], t + 1, per), "cudaMemset");
  }
  // Baselines: the same bytes through one pinned buffer of each tensor's size.
  void* pinned = nullptr;
  Check(cudaHostAlloc(&pinned, per, cudaHostAllocDefault), "cudaHostAlloc");
  const Buffers buffers{device, target, pinned, per};
  const std::string file = dir + ".baseline";

  std::filesystem::remove_all(dir);
  auto db = ckptdb::DB::Open(ckptdb::Options(), dir);
  Check(db.status(), "open");
  const ckptdb::StateDict save = DeviceStateDict(device, per);
  ckptdb::StateDict load = DeviceStateDict(target, per);
  bool ok = true;
  Best best;
  for (int i = 0; i < repeat; ++i) {
    for (int t = 0; t < tensors; ++t)
      Check(cudaMemset(target[t], 0, per), "cudaMemset");
    (void)(*db)->Delete(ckptdb::CheckpointSelector::Latest());
    double start = Now();
    Check((*db)->Save(save, {}).status(), "save");
    best.save = std::min(best.save, Now() - start);
    start = Now();
    Check((*db)->Load(load, ckptdb::CheckpointSelector::Latest(), {}).status(),
          "load");
    best.load = std::min(best.load, Now() - start);
    ok = ok && LoadedRight(buffers);
    best.d2h = std::min(best.d2h, CopyAll(buffers, cudaMemcpyDeviceToHost));
    best.h2d = std::min(best.h2d, CopyAll(buffers, cudaMemcpyHostToDevice));
    best.file_save = std::min(best.file_save, FileSave(buffers, file));
    best.file_load = std::min(best.file_load, FileLoad(buffers, file));
  }
  PrintTable(static_cast<double>(total), best, ok);
  std::filesystem::remove_all(dir);
  ::unlink(file.c_str());
  return ok ? 0 : 1;
}
