#include "storage/keys.h"

#include <algorithm>
#include <cstring>

namespace ckptdb::storage {

namespace {

// Writes `v` big-endian at `p`.
void StoreBigEndian64(char* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v);
}

}  // namespace

void PutBigEndian64(std::string* out, uint64_t v) {
  char bytes[8];
  StoreBigEndian64(bytes, v);
  out->append(bytes, 8);
}

uint64_t GetBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

namespace {

void PutBigEndian32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out->push_back(static_cast<char>(v >> shift));
}

}  // namespace

std::string CheckpointKeyPrefix(int64_t checkpoint_id) {
  std::string out;
  PutBigEndian64(&out, static_cast<uint64_t>(checkpoint_id));
  return out;
}

std::string CheckpointKeyEnd(int64_t checkpoint_id) {
  return CheckpointKeyPrefix(checkpoint_id) + std::string(5, '\xff');
}

std::string WriterKeyPrefix(int64_t checkpoint_id, int32_t writer_rank) {
  std::string out = CheckpointKeyPrefix(checkpoint_id);
  PutBigEndian32(&out, static_cast<uint32_t>(writer_rank));
  return out;
}

std::string EncodeChunkKey(int64_t checkpoint_id, int32_t writer_rank,
                           std::string_view tensor_key,
                           const Shape& global_offset) {
  std::string out;
  AppendChunkKey(checkpoint_id, writer_rank, tensor_key, global_offset, &out);
  return out;
}

void AppendChunkKey(int64_t checkpoint_id, int32_t writer_rank,
                    std::string_view tensor_key, const Shape& global_offset,
                    std::string* out) {
  // The tensor key escaped: each NUL byte followed by 0xff (rare: counted
  // first, and the key copied whole when it has none).
  const size_t nuls = static_cast<size_t>(
      std::count(tensor_key.begin(), tensor_key.end(), '\0'));
  const size_t start = out->size();
  out->resize(start + 12 + tensor_key.size() + nuls + 2 +
              8 * global_offset.size());
  char* p = out->data() + start;
  StoreBigEndian64(p, static_cast<uint64_t>(checkpoint_id));
  for (int i = 0; i < 4; ++i)
    p[8 + i] =
        static_cast<char>(static_cast<uint32_t>(writer_rank) >> (24 - 8 * i));
  p += 12;
  if (nuls == 0) {
    std::memcpy(p, tensor_key.data(), tensor_key.size());
    p += tensor_key.size();
  } else {
    for (char c : tensor_key) {
      *p++ = c;
      if (c == '\0') *p++ = '\xff';
    }
  }
  *p++ = '\0';
  *p++ = '\x01';
  // Offsets are non-negative: the sign flip keeps the order of signed values
  // anyway.
  for (int64_t o : global_offset) {
    StoreBigEndian64(p, static_cast<uint64_t>(o) ^ (uint64_t{1} << 63));
    p += 8;
  }
  CKPTDB_ASSERT(p == out->data() + out->size());
}

bool DecodeCheckpointId(std::string_view key, int64_t* checkpoint_id) {
  if (key.size() < 8) return false;
  *checkpoint_id = static_cast<int64_t>(GetBigEndian64(key.data()));
  return true;
}

std::string MetaKey(int64_t checkpoint_id) {
  return CheckpointKeyPrefix(checkpoint_id);
}

bool DecodeMetaKey(std::string_view key, int64_t* checkpoint_id) {
  if (key.size() != 8 || static_cast<uint8_t>(key[0]) == 0xff) return false;
  *checkpoint_id = static_cast<int64_t>(GetBigEndian64(key.data()));
  return true;
}

std::string TensorRecordKey(int64_t checkpoint_id,
                            std::string_view tensor_key) {
  std::string out = MetaKey(checkpoint_id);
  out.reserve(out.size() + 1 + tensor_key.size());
  out.push_back('\0');
  out.append(tensor_key);
  return out;
}

std::string SmallTensorsKey(int64_t checkpoint_id) {
  return MetaKey(checkpoint_id) + '\x01';
}

bool DecodeSmallTensorsKey(std::string_view key, int64_t* checkpoint_id) {
  if (key.size() != 9 || key[8] != '\x01' ||
      static_cast<uint8_t>(key[0]) == 0xff)
    return false;
  *checkpoint_id = static_cast<int64_t>(GetBigEndian64(key.data()));
  return true;
}

std::string MetaRangeEnd(int64_t checkpoint_id) {
  return MetaKey(checkpoint_id) + '\x02';
}

bool DecodeTensorRecordKey(std::string_view key, int64_t* checkpoint_id,
                           std::string_view* tensor_key) {
  if (key.size() < 9 || key[8] != '\0' || static_cast<uint8_t>(key[0]) == 0xff)
    return false;
  *checkpoint_id = static_cast<int64_t>(GetBigEndian64(key.data()));
  *tensor_key = key.substr(9);
  return true;
}

}  // namespace ckptdb::storage
