#include "bench/harness.h"

#include <fcntl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace ckptdb::bench {
namespace {

namespace fs = std::filesystem;

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Resident memory of this process from /proc/self/status ("VmRSS", "VmHWM").
double ProcMiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0)
      return std::stod(line.substr(std::strlen(field) + 1)) / 1024.0;
  }
  return 0;
}

}  // namespace

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "ckpt-bench: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

uint64_t ParseSize(const std::string& text, const std::string& option) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw CLI::ValidationError(option, "not a size: '" + text + "'");
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "K" || unit == "KiB") scale = 1024;
  if (unit == "M" || unit == "MiB") scale = kMiB;
  if (unit == "G" || unit == "GiB") scale = kGiB;
  if (scale == 1 && !unit.empty() && unit != "B")
    throw CLI::ValidationError(option, "unknown unit in '" + text + "'");
  if (value <= 0) throw CLI::ValidationError(option, "must be positive");
  return static_cast<uint64_t>(value * scale);
}

void Generate(const Box& b, int64_t total_cols, size_t esize, uint8_t* out) {
  for (int64_t i = 0; i < b.rows; ++i) {
    uint8_t* row = out + static_cast<size_t>(i * b.cols) * esize;
    const uint64_t base = (static_cast<uint64_t>(b.t) << 40) +
                          static_cast<uint64_t>((b.r0 + i) * total_cols + b.c0);
    for (int64_t j = 0; j < b.cols; ++j) {
      const uint64_t v = Mix(base + j);
      std::memcpy(row + j * esize, &v, esize);
    }
  }
}

bool Matches(const Box& b, int64_t total_cols, size_t esize,
             const uint8_t* data) {
  std::vector<uint8_t> want(static_cast<size_t>(b.cols) * esize);
  for (int64_t i = 0; i < b.rows; ++i) {
    Generate({b.t, b.r0 + i, 1, b.c0, b.cols}, total_cols, esize, want.data());
    if (std::memcmp(want.data(), data + i * want.size(), want.size()) != 0)
      return false;
  }
  return true;
}

uint64_t Layout::bytes() const {
  uint64_t n = 0;
  for (const auto& b : buffers) n += b.size();
  return n;
}

StateDict Layout::Dict(DType dtype) {
  StateDict sd;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box& b = boxes[i];
    sd.Child("layers").Set(
        "t" + std::to_string(b.t),
        TensorView::Shard(buffers[i].data(), dtype, {b.rows, b.cols},
                          {rows, cols}, {b.r0, b.c0}));
  }
  return sd;
}

Layout MakeLayout(const Config& c, int dim, int part, int parts) {
  Layout l;
  l.esize = ckptdb::DTypeSize(c.dtype);
  l.cols = 2048;
  l.rows = std::max<int64_t>(
      1, static_cast<int64_t>(c.bytes / c.tensors / (l.cols * l.esize)));
  for (int t = 0; t < c.tensors; ++t) {
    const int64_t n = dim == 0 ? l.rows : l.cols;
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    Box b = dim == 0 ? Box{t, begin, end - begin, 0, l.cols}
                     : Box{t, 0, l.rows, begin, end - begin};
    l.boxes.push_back(b);
    l.buffers.emplace_back(static_cast<size_t>(b.rows * b.cols) * l.esize);
  }
  return l;
}

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

RssProbe::RssProbe() {
  std::ofstream("/proc/self/clear_refs") << "5";
  start_ = ProcMiB("VmRSS:");
}

double RssProbe::ExtraMiB() const {
  return std::max(0.0, ProcMiB("VmHWM:") - start_);
}

bool IsTmpfs(const std::string& dir) {
  struct statfs st {};
  return statfs(dir.c_str(), &st) == 0 && st.f_type == 0x01021994;
}

void DropCaches(const std::string& dir) {
  // A file removed since the listing (RocksDB's background deletions) is
  // skipped: its pages are gone with it.
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code stat_ec;
    if (!it->is_regular_file(stat_ec)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double Timed(MPI_Comm comm, const std::function<void()>& body) {
  MPI_Barrier(comm);
  const double start = Now();
  body();
  MPI_Barrier(comm);
  return Now() - start;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double MedianRatio(const std::vector<double>& baseline,
                   const std::vector<double>& ours) {
  std::vector<double> ratios;
  for (size_t i = 0; i < ours.size(); ++i)
    ratios.push_back(baseline[i] / ours[i]);
  return Median(ratios);
}

}  // namespace ckptdb::bench
