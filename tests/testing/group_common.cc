#include <cstring>

#include "tests/testing/group.h"

namespace ckptdb::testing {

uint64_t SumOver(Communicator& comm, uint64_t value) {
  std::string mine(sizeof(value), '\0');
  std::memcpy(mine.data(), &value, sizeof(value));
  auto all = comm.AllGather(mine);
  if (!all.ok()) return UINT64_MAX;  // fails whatever equality it feeds
  uint64_t sum = 0;
  for (const std::string& bytes : *all) {
    uint64_t v = 0;
    std::memcpy(&v, bytes.data(), sizeof(v));
    sum += v;
  }
  return sum;
}

}  // namespace ckptdb::testing
