// libFuzzer target: DecodeCheckpoint must never crash on any input (hostile
// stores). Build with clang: cmake -DCKPTDB_FUZZ=ON
// -DCMAKE_CXX_COMPILER=clang++ ...; run build/storage/metadata_fuzz [corpus
// dir] -max_total_time=60.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "storage/metadata_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto meta = ckptdb::storage::DecodeCheckpoint(bytes);
  if (meta.ok()) {
    // A record that decodes must re-encode to one that decodes the same way.
    auto again = ckptdb::storage::DecodeCheckpoint(
        ckptdb::storage::EncodeCheckpoint(*meta));
    if (!again.ok() || again->tensors.size() != meta->tensors.size())
      __builtin_trap();
  }
  (void)ckptdb::storage::DecodeCheckpointInfo(bytes);
  return 0;
}
