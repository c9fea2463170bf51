#include "storage/box_stream.h"

#include <algorithm>

namespace ckptdb::storage {
namespace {

// A chunk's flags byte: what is given rather than predicted.
constexpr uint8_t kOffsetGiven = 1;
constexpr uint8_t kShapeGiven = 2;
constexpr uint8_t kWriterGiven = 4;
constexpr uint8_t kKnownFlags = kOffsetGiven | kShapeGiven | kWriterGiven;
// Offset differences beyond it cannot lead to a valid offset.
constexpr int64_t kMaxDelta = 2 * kMaxExtent;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

uint64_t ZigZag(uint64_t v) { return (v << 1) ^ (0 - (v >> 63)); }

int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>((v >> 1) ^ (0 - (v & 1)));
}

// Reads bytes and varints, never past the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())),
        end_(p_ + bytes.size()) {}

  bool Byte(uint8_t* out) {
    if (p_ == end_) return false;
    *out = *p_++;
    return true;
  }
  // An LEB128 varint of at most 64 bits.
  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      if (shift == 63 && b > 1) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Moves `offset` from a chunk of `shape` to where the next chunk is
// predicted: an odometer over the tensor's extents, advancing the last
// dimension by the chunk's extent and carrying into the dimension before it at
// the tensor's end. Values stay below 2^50 for inputs up to 2^48 each.
void Advance(const Shape& global, const int64_t* shape, size_t n,
             int64_t* offset) {
  for (size_t d = n; d-- > 0;) {
    offset[d] += shape[d];
    if (d == 0 || offset[d] < global[d]) return;
    offset[d] = 0;
  }
}

int64_t At(const Shape& v, size_t d) { return d < v.size() ? v[d] : 0; }

// The reference shape clipped to the tensor at `offset`.
int64_t Clipped(int64_t reference, int64_t extent, int64_t offset) {
  return std::min(reference, std::max<int64_t>(0, extent - offset));
}

Status Bad(const ErrorName& what, size_t chunk, const std::string& why) {
  return Status::Corruption("checkpoint metadata: " + what + " chunk " +
                            std::to_string(chunk) + ": " + why);
}

}  // namespace

bool CheckedVolume(const Shape& shape, uint64_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) ||
        n > (uint64_t{1} << 62)) {
      return false;
    }
  }
  *out = n;
  return true;
}

std::string EncodeBoxStream(const Shape& global_shape,
                            std::span<const ChunkMetadata* const> chunks) {
  const size_t n = global_shape.size();
  std::string out;
  out.reserve(chunks.size() * 2);
  Shape predicted(n, 0), prev_shape(n), reference = global_shape;
  const ChunkMetadata* prev = nullptr;
  int32_t prev_writer = 0;
  for (const ChunkMetadata* c : chunks) {
    CKPTDB_ASSERT(c->box.origin.size() == n && c->box.shape.size() == n);
    if (prev != nullptr) {
      for (size_t d = 0; d < n; ++d) {
        predicted[d] = At(prev->box.origin, d);
        prev_shape[d] = At(prev->box.shape, d);
      }
      Advance(global_shape, prev_shape.data(), n, predicted.data());
    }
    uint8_t flags = 0;
    for (size_t d = 0; d < n; ++d) {
      const int64_t offset = At(c->box.origin, d);
      if (offset != predicted[d]) flags |= kOffsetGiven;
      if (At(c->box.shape, d) != Clipped(reference[d], global_shape[d], offset))
        flags |= kShapeGiven;
    }
    if (c->writer_rank != prev_writer) flags |= kWriterGiven;
    out.push_back(static_cast<char>(flags));
    if (flags & kOffsetGiven) {
      for (size_t d = 0; d < n; ++d) {
        PutVarint(&out, ZigZag(static_cast<uint64_t>(At(c->box.origin, d)) -
                               static_cast<uint64_t>(predicted[d])));
      }
    }
    if (flags & kShapeGiven) {
      for (size_t d = 0; d < n; ++d) {
        reference[d] = At(c->box.shape, d);
        PutVarint(&out, static_cast<uint64_t>(reference[d]));
      }
    }
    if (flags & kWriterGiven)
      PutVarint(&out, static_cast<uint32_t>(c->writer_rank));
    prev_writer = c->writer_rank;
    prev = c;
  }
  return out;
}

Status DecodeBoxStream(std::string_view bytes, const Shape& global_shape,
                       size_t elem_size, int32_t world_size,
                       const ErrorName& what,
                       std::vector<ChunkMetadata>* chunks) {
  const size_t n = global_shape.size();
  CKPTDB_ASSERT(n <= kMaxDims);
  ByteReader in(bytes);
  // The previous chunk's offset and shape, and the reference shape.
  int64_t offset[kMaxDims] = {}, shape[kMaxDims] = {}, reference[kMaxDims];
  std::copy(global_shape.begin(), global_shape.end(), reference);
  int32_t writer = 0;
  for (size_t i = 0; i < chunks->size(); ++i) {
    uint8_t flags = 0;
    if (!in.Byte(&flags)) return Bad(what, i, "the box stream ends early");
    if ((flags & ~kKnownFlags) != 0)
      return Bad(what, i, "unknown flags " + std::to_string(flags));
    if (i > 0) Advance(global_shape, shape, n, offset);
    for (size_t d = 0; (flags & kOffsetGiven) && d < n; ++d) {
      uint64_t v = 0;
      if (!in.Varint(&v)) return Bad(what, i, "a bad offset varint");
      const int64_t delta = UnZigZag(v);
      if (delta < -kMaxDelta || delta > kMaxDelta)
        return Bad(what, i, "offset delta " + std::to_string(delta));
      offset[d] += delta;
    }
    for (size_t d = 0; d < n; ++d) {
      if (offset[d] < 0 || offset[d] > kMaxExtent)
        return Bad(what, i, "offset has extent " + std::to_string(offset[d]));
    }
    for (size_t d = 0; (flags & kShapeGiven) && d < n; ++d) {
      uint64_t v = 0;
      if (!in.Varint(&v)) return Bad(what, i, "a bad shape varint");
      if (v > static_cast<uint64_t>(kMaxExtent)) {
        return Bad(
            what, i,
            "shape has extent " + std::to_string(static_cast<int64_t>(v)));
      }
      reference[d] = static_cast<int64_t>(v);
    }
    for (size_t d = 0; d < n; ++d) {
      shape[d] = (flags & kShapeGiven)
                     ? reference[d]
                     : Clipped(reference[d], global_shape[d], offset[d]);
    }
    if (flags & kWriterGiven) {
      uint64_t v = 0;
      if (!in.Varint(&v)) return Bad(what, i, "a bad writer rank varint");
      if (v >= static_cast<uint64_t>(world_size))
        return Bad(what, i, "writer rank " + std::to_string(v));
      writer = static_cast<int32_t>(v);
    }
    ChunkMetadata& chunk = (*chunks)[i];
    chunk.box.origin.assign(offset, offset + n);
    chunk.box.shape.assign(shape, shape + n);
    chunk.writer_rank = writer;
    if (!CheckedVolume(chunk.box.shape, elem_size, &chunk.nbytes))
      return Bad(what, i, "too large");
  }
  if (in.left() != 0) {
    return Status::Corruption("checkpoint metadata: " + what +
                              " box stream has " + std::to_string(in.left()) +
                              " bytes after its last chunk");
  }
  return Status::OK();
}

}  // namespace ckptdb::storage
