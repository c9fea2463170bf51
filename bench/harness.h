#pragma once

// What ckpt-bench's workloads share: its options, the generated state (each
// element's bytes a function of its position, so loads are checked without a
// second copy), and timing across ranks.

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "ckptdb/db.h"
#include "ckptdb/mpi.h"

namespace ckptdb::bench {

inline constexpr double kMiB = 1024.0 * 1024, kGiB = kMiB * 1024;

// ckpt-bench's options, as main parses them.
struct Config {
  std::string dir;
  std::string size = "2G";
  uint64_t bytes = 0;
  int tensors = 64;
  std::string dtype_name = "float32";
  DType dtype = DType::kFloat32;
  std::vector<std::string> workloads = {"save", "load", "reshard"};
  int reshard_ranks = 0;
  int repeat = 3;
  int io_threads = 0;
  std::string chunk = "0";  // 0: the library's default
  uint64_t chunk_bytes = 0;
  std::string load_buffer = "0";
  uint64_t load_buffer_bytes = 0;
  // Share of the tensors (rounded up) whose every byte changes between two
  // saves of the save, async and incremental workloads: 1 is a training
  // step (every parameter and moment updated), 0.1 a model nine tenths
  // frozen, 0 a state saved again unchanged.
  double changed = 1.0;
  // Options::snapshot_bytes of every handle (K/M/G suffixes; "0": the default).
  std::string snapshot = "0";
  uint64_t snapshot_bytes = 0;
  bool json = false;
  bool verify = true;
  bool keep = false;
};

// Prints `what` and aborts the job.
[[noreturn]] void Die(const std::string& what);
// Dies unless `s` is OK.
void Check(const Status& s, const char* what);
// A size with an optional K/M/G (or KiB/MiB/GiB) suffix; CLI::ValidationError
// naming `option` when it is not one.
uint64_t ParseSize(const std::string& text, const std::string& option);

// A row-major box [r0, r0 + rows) x [c0, c0 + cols) of tensor `t`
// ([total_rows, total_cols] elements of `esize` bytes). Each element's bytes
// are a function of (t, its global position): a load checks what it got
// without another copy of the state.
struct Box {
  int t;
  int64_t r0, rows, c0, cols;
};

// Fills `out` with the box's elements.
void Generate(const Box& b, int64_t total_cols, size_t esize, uint8_t* out);
// Whether `data` holds the box's elements.
bool Matches(const Box& b, int64_t total_cols, size_t esize,
             const uint8_t* data);

// Page-aligned memory for the state's buffers. Where a buffer starts decides
// how fast the kernel copies a read into it (on AMD cores with FSRM, 5x
// slower 1-31 bytes past the file's page offset, and a plain vector's large
// allocation starts 16 bytes into a page): the baselines and ckptdb read into
// the same buffers, which start where a framework's tensors do.
template <typename T>
struct PageAligned {
  using value_type = T;
  PageAligned() = default;
  template <typename U>
  PageAligned(const PageAligned<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = (n * sizeof(T) + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, bytes == 0 ? 4096 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  friend bool operator==(const PageAligned&, const PageAligned&) {
    return true;
  }
};
using Buffer = std::vector<uint8_t, PageAligned<uint8_t>>;

// The benchmark state: tensor shape and this rank's buffers.
struct Layout {
  int64_t rows = 0, cols = 0;
  size_t esize = 0;
  std::vector<Box> boxes;
  std::vector<Buffer> buffers;

  uint64_t bytes() const;
  StateDict Dict(DType dtype);
};

// Tensors split by rows (dim 0) or columns (dim 1) into `parts`; this rank
// holds part `part`.
Layout MakeLayout(const Config& c, int dim, int part, int parts);

// Seconds on a monotonic clock.
double Now();

// `v` reduced by `op` over `comm`, on every rank (double or uint64_t).
template <typename T>
T Reduce(T v, MPI_Op op, MPI_Comm comm = MPI_COMM_WORLD) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, uint64_t>);
  T out{};
  MPI_Datatype type =
      std::is_same_v<T, double> ? MPI_DOUBLE : MPI_UNSIGNED_LONG_LONG;
  MPI_Allreduce(&v, &out, 1, type, op, comm);
  return out;
}

// Peak resident memory of a phase, beyond what the process held when it
// began. The kernel's high-water mark is reset (clear_refs 5) at the start.
class RssProbe {
 public:
  RssProbe();
  double ExtraMiB() const;

 private:
  double start_;
};

bool IsTmpfs(const std::string& dir);
// fsync and drop from the page cache every file under `dir`.
void DropCaches(const std::string& dir);
// One timed collective phase: barrier, run, barrier; the slowest rank's time.
double Timed(MPI_Comm comm, const std::function<void()>& body);
double Median(std::vector<double> v);
// The median over runs of baseline seconds / ckptdb seconds, each run's pair
// measured back to back: on a shared machine (a VM's disk, its host's cache)
// the speed of both drifts from run to run, and pairing cancels the drift.
double MedianRatio(const std::vector<double>& baseline,
                   const std::vector<double>& ours);

}  // namespace ckptdb::bench
