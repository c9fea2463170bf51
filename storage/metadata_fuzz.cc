// libFuzzer target: the metadata decoders must never crash on any input
// (hostile stores). Build with clang: cmake -DCKPTDB_FUZZ=ON
// -DCMAKE_CXX_COMPILER=clang++ ...; run build/storage/metadata_fuzz [corpus
// dir] -max_total_time=60.
//
// The first input byte picks the decoder: a main record (any format), a
// tensor record or a small tensors' record of a fixed valid checkpoint, a bare
// box stream, or a metadata copy file (given its checksum, so that its inner
// decoding is reached).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/checksum.h"
#include "core/little_endian.h"
#include "storage/box_stream.h"
#include "storage/metadata_codec.h"
#include "storage/record_copies.h"

namespace {

using namespace ckptdb;
using namespace ckptdb::storage;

// A checkpoint with a 0-d tensor, an empty one and a [6, 4] one in 3 chunks,
// in format `version` (3: a record per tensor; 4: the three in the small
// tensors' record), against whose main record other records are decoded.
const MainRecord& FixedMain(uint32_t version = 3) {
  static const MainRecord* mains[2] = {nullptr, nullptr};
  const MainRecord*& main = mains[version == 3 ? 0 : 1];
  if (main == nullptr)
    main = [version] {
      CheckpointMetadata meta;
      meta.info.id = 7;
      meta.info.world_size = 300;
      meta.tensors["a"] = {DType::kFloat32, {}, {{Box{}, 299, 4, 1}}};
      meta.tensors["b"] = {DType::kInt8, {0, 2}, {}};
      meta.tensors["c"] = {DType::kBFloat16,
                           {6, 4},
                           {{Box{{0, 0}, {2, 4}}, 3, 16, 2},
                            {Box{{2, 0}, {4, 3}}, 200, 24, 3},
                            {Box{{2, 3}, {4, 1}}, 200, 8, 4}}};
      meta.info.nbytes = 4 + 48;
      for (const auto& [key, t] : meta.tensors) meta.flat_mapping[key] = {key};
      auto decoded = DecodeMainRecord(
          EncodeCheckpointRecordsOfFormat(meta, version)[0].second);
      if (!decoded.ok()) __builtin_trap();
      return new MainRecord(std::move(*decoded));
    }();
  return *main;
}

void FuzzMain(std::string_view bytes) {
  auto main = DecodeMainRecord(bytes);
  if (main.ok() && main->has_chunks()) {
    // A record that decodes must re-encode to records that decode the same.
    auto again = DecodeCheckpointRecords(EncodeCheckpointRecords(main->meta));
    if (!again.ok() || again->tensors.size() != main->meta.tensors.size())
      __builtin_trap();
  }
  (void)DecodeCheckpointInfo(bytes);
}

void FuzzTensor(std::string_view bytes) {
  for (const char* key : {"a", "b", "c"}) {
    auto chunks = DecodeTensorRecord(FixedMain(), key, bytes);
    if (chunks.ok() && chunks->size() != FixedMain().chunk_counts.at(key))
      __builtin_trap();
  }
}

void FuzzSmallTensors(std::string_view bytes) {
  MainRecord main = FixedMain(4);
  if (DecodeSmallTensors(&main, bytes, nullptr).ok()) {
    for (const auto& [key, tensor] : main.meta.tensors) {
      // Decoded chunks partition their tensor.
      uint64_t held = 0;
      for (const ChunkMetadata& c : tensor.chunks) held += c.nbytes;
      if (held != NumElements(tensor.global_shape) * DTypeSize(tensor.dtype))
        __builtin_trap();
    }
  }
}

void FuzzBoxes(std::string_view bytes) {
  if (bytes.empty()) return;
  std::vector<ChunkMetadata> chunks(static_cast<uint8_t>(bytes[0]) % 16);
  (void)DecodeBoxStream(bytes.substr(1), {5, 7, 3}, 2, 1000, "t", &chunks);
  (void)DecodeBoxStream(bytes.substr(1), {}, 8, 2, "t", &chunks);
}

void FuzzCopy(std::string_view bytes) {
  std::string file(bytes);
  const uint64_t sum = ChunkChecksum(file.data(), file.size());
  PutLittleEndian(&file, sum);
  for (CopyKind kind : {CopyKind::kRecords, CopyKind::kLocators}) {
    auto entries = DecodeCopy(kind, file);
    // Entries that decode must encode to a copy that decodes the same.
    if (entries.ok() &&
        *DecodeCopy(kind, EncodeCopy(kind, *entries)) != *entries)
      __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  switch (data[0] % 5) {
    case 0:
      FuzzMain(bytes);
      break;
    case 1:
      FuzzTensor(bytes);
      break;
    case 2:
      FuzzBoxes(bytes);
      break;
    case 3:
      FuzzSmallTensors(bytes);
      break;
    default:
      FuzzCopy(bytes);
  }
  return 0;
}
