#include "planner/write_parts.h"

#include <algorithm>

namespace ckptdb::planner {

std::vector<size_t> SplitIntoParts(std::span<const uint64_t> bytes, int threads,
                                   uint64_t part_bytes, size_t part_chunks) {
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  const size_t most = std::max<size_t>(
      1, std::min<size_t>(static_cast<size_t>(std::max(threads, 1)),
                          bytes.size()));
  const size_t parts = std::clamp<size_t>(
      std::max<uint64_t>(total / std::max<uint64_t>(part_bytes, 1),
                         bytes.size() / std::max<size_t>(part_chunks, 1)),
      1, most);
  std::vector<size_t> begins(parts + 1, bytes.size());
  begins[0] = 0;
  uint64_t seen = 0;
  size_t p = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    while (p + 1 < parts && seen >= total * (p + 1) / parts) begins[++p] = i;
    seen += bytes[i];
  }
  return begins;
}

std::vector<size_t> SnapshotCopyOrder(std::span<const size_t> begins) {
  std::vector<size_t> order;
  if (begins.size() < 2) return order;
  order.reserve(begins.back() - begins.front());
  for (size_t back = 1;; ++back) {
    const size_t before = order.size();
    for (size_t p = 0; p + 1 < begins.size(); ++p) {
      if (begins[p + 1] - begins[p] >= back)
        order.push_back(begins[p + 1] - back);
    }
    if (order.size() == before) return order;
  }
}

}  // namespace ckptdb::planner
