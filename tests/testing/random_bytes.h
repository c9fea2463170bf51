#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ckptdb::testing {

// `n` bytes of deterministic contents, a function of `seed`.
inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

}  // namespace ckptdb::testing
