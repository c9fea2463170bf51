// Encoding a checkpoint's records (EncodeCheckpointRecords and the older
// formats' encoders for tests); decoding them is metadata_codec.cc's. The
// layouts: storage/checkpoint.capnp.
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "storage/box_stream.h"
#include "storage/checkpoint.capnp.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"

namespace ckptdb::storage {
namespace {

template <typename Builder>
void SetShape(Builder&& list_init, const Shape& shape) {
  for (size_t i = 0; i < shape.size(); ++i)
    list_init.set(static_cast<unsigned>(i), shape[i]);
}

template <typename Builder>
void SetPath(Builder builder, const std::vector<std::string>& path) {
  for (size_t i = 0; i < path.size(); ++i) {
    builder.set(static_cast<unsigned>(i),
                capnp::Text::Reader(path[i].data(), path[i].size()));
  }
}

capnp::Text::Reader TextOf(const std::string& s) {
  return capnp::Text::Reader(s.data(), s.size());
}

// The path and path kinds of each key, for keys asked in ascending order
// (one walker for the tensors, one for the values): found by walking the
// maps alongside, without a lookup per key.
class PathsInKeyOrder {
 public:
  explicit PathsInKeyOrder(const CheckpointMetadata& meta)
      : meta_(meta),
        path_(meta.flat_mapping.begin()),
        kinds_(meta.path_kinds.begin()) {}

  const std::vector<std::string>* Path(const std::string& key) {
    return Find(meta_.flat_mapping, path_, key);
  }
  const PathKinds* Kinds(const std::string& key) {
    return Find(meta_.path_kinds, kinds_, key);
  }

 private:
  // The entry at `key`, moving `at` up to it; a key below `at`'s (asked out
  // of order) is looked up.
  template <typename Map>
  static const typename Map::mapped_type* Find(const Map& map,
                                               typename Map::const_iterator& at,
                                               const std::string& key) {
    if (at != map.begin() && !(std::prev(at)->first < key)) {
      auto found = map.find(key);
      return found == map.end() ? nullptr : &found->second;
    }
    while (at != map.end() && at->first < key) ++at;
    return at != map.end() && at->first == key ? &at->second : nullptr;
  }

  const CheckpointMetadata& meta_;
  std::map<std::string, std::vector<std::string>>::const_iterator path_;
  std::map<std::string, PathKinds>::const_iterator kinds_;
};

// Sets a tensor's or value's flat key, its path from the flat mapping and
// the kinds of the path's parts (only when some part is not a str key).
template <typename Builder>
void SetKeyAndPath(Builder builder, const std::string& key,
                   PathsInKeyOrder& paths) {
  builder.setKey(TextOf(key));
  if (const std::vector<std::string>* path = paths.Path(key)) {
    SetPath(builder.initPath(static_cast<unsigned>(path->size())), *path);
  }
  if (const PathKinds* kinds = paths.Kinds(key)) {
    builder.setPathKinds(capnp::Data::Reader(
        reinterpret_cast<const uint8_t*>(kinds->data()), kinds->size()));
  }
}

template <typename ListBuilder>
void SetChunksV1(ListBuilder chunks, const std::vector<ChunkMetadata>& from) {
  for (unsigned c = 0; c < from.size(); ++c) {
    const ChunkMetadata& chunk = from[c];
    auto cb = chunks[c];
    SetShape(
        cb.initGlobalOffset(static_cast<unsigned>(chunk.box.origin.size())),
        chunk.box.origin);
    SetShape(cb.initLocalShape(static_cast<unsigned>(chunk.box.shape.size())),
             chunk.box.shape);
    cb.setWriterRank(chunk.writer_rank);
    cb.setNbytes(chunk.nbytes);
    cb.setChecksum(chunk.checksum);
  }
}

void SetValuesAndUserMetadata(Checkpoint::Builder root,
                              const CheckpointMetadata& meta) {
  auto values = root.initValues(static_cast<unsigned>(meta.values.size()));
  unsigned i = 0;
  PathsInKeyOrder paths(meta);
  for (const auto& [key, value] : meta.values) {
    auto v = values[i++];
    SetKeyAndPath(v, key, paths);
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>)
            v.setInt(x);
          else if constexpr (std::is_same_v<T, double>)
            v.setFloat(x);
          else if constexpr (std::is_same_v<T, bool>)
            v.setBool(x);
          else if constexpr (std::is_same_v<T, std::string>)
            v.setText(TextOf(x));
          else if constexpr (std::is_same_v<T, None>)
            v.setNone();
          else if constexpr (std::is_same_v<T, BigInt>)
            v.setBigInt(TextOf(x.digits));
          else
            v.setBytes(capnp::Data::Reader(
                reinterpret_cast<const uint8_t*>(x.data.data()),
                x.data.size()));
        },
        value);
  }
  auto user =
      root.initUserMetadata(static_cast<unsigned>(meta.user_metadata.size()));
  i = 0;
  for (const auto& [key, value] : meta.user_metadata) {
    user[i].setKey(TextOf(key));
    user[i++].setValue(TextOf(value));
  }
}

// The message's flat bytes, written straight into the string (a main record
// of 10,000 tensors is about 1.7 MB: no flat array in between).
std::string ToBytes(capnp::MessageBuilder& message) {
  std::string out(
      capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word), '\0');
  kj::ArrayOutputStream stream(
      kj::arrayPtr(reinterpret_cast<kj::byte*>(out.data()), out.size()));
  capnp::writeMessage(stream, message);
  CKPTDB_ASSERT(stream.getArray().size() == out.size());
  return out;
}

// Content hashes when every chunk has one; holders when some chunk is
// another checkpoint's.
void SetIncremental(TensorChunks::Builder r,
                    std::span<const ChunkMetadata* const> sorted) {
  bool hashed = !sorted.empty(), shared = false;
  for (const ChunkMetadata* c : sorted) {
    hashed &= c->content_hash.has_value();
    shared |= c->holder_id != 0;
  }
  if (hashed) {
    auto hashes = r.initHashes(static_cast<unsigned>(16 * sorted.size()));
    for (size_t i = 0; i < sorted.size(); ++i) {
      std::memcpy(hashes.begin() + 16 * i, &sorted[i]->content_hash->low, 8);
      std::memcpy(hashes.begin() + 16 * i + 8, &sorted[i]->content_hash->high,
                  8);
    }
  }
  if (shared) {
    auto holders = r.initHolders(static_cast<unsigned>(sorted.size()));
    for (unsigned i = 0; i < sorted.size(); ++i)
      holders.set(i, sorted[i]->holder_id);
  }
}

// Appends the tensor's chunks to `sorted`, in global offset order; returns
// them there.
std::span<const ChunkMetadata* const> AppendSortedChunks(
    const TensorMetadata& tensor, std::vector<const ChunkMetadata*>* sorted) {
  const size_t begin = sorted->size();
  for (const ChunkMetadata& chunk : tensor.chunks) sorted->push_back(&chunk);
  const auto first = sorted->begin() + static_cast<ptrdiff_t>(begin);
  auto by_origin = [](const ChunkMetadata* a, const ChunkMetadata* b) {
    return a->box.origin < b->box.origin;
  };
  // Kept sorted by whoever built the metadata, mostly (and a stable sort
  // allocates a buffer even for one chunk).
  if (!std::is_sorted(first, sorted->end(), by_origin))
    std::stable_sort(first, sorted->end(), by_origin);
  return std::span<const ChunkMetadata* const>(*sorted).subspan(begin);
}

// A TensorChunks message's chunk fields: count, packed boxes, checksums, and
// hashes and holders where there are any.
void SetChunks(TensorChunks::Builder r,
               std::span<const ChunkMetadata* const> sorted,
               const std::string& boxes) {
  r.setChunkCount(sorted.size());
  r.setBoxes(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(boxes.data()),
                                 boxes.size()));
  auto checksums = r.initChecksums(static_cast<unsigned>(sorted.size()));
  for (unsigned i = 0; i < sorted.size(); ++i)
    checksums.set(i, sorted[i]->checksum);
  SetIncremental(r, sorted);
}

// Whether a tensor's chunks go in the small tensors' record (format 4 on).
bool IsSmall(const TensorMetadata& tensor, uint32_t version) {
  return version >= 4 && tensor.chunks.size() <= kMaxSmallTensorChunks;
}

std::string EncodeTensorRecord(int64_t checkpoint_id, const std::string& key,
                               const TensorMetadata& tensor, uint32_t version) {
  std::vector<const ChunkMetadata*> chunks;
  chunks.reserve(tensor.chunks.size());
  const auto sorted = AppendSortedChunks(tensor, &chunks);
  const std::string boxes = EncodeBoxStream(tensor.global_shape, sorted);
  // Room for the header, the key, the boxes and the checksums in one segment.
  capnp::MallocMessageBuilder message(static_cast<unsigned>(
      16 + (key.size() + boxes.size()) / 8 + 4 * sorted.size()));
  auto r = message.initRoot<TensorChunks>();
  r.setFormatVersion(version);
  r.setCheckpointId(checkpoint_id);
  r.setKey(TextOf(key));
  SetChunks(r, sorted, boxes);
  return ToBytes(message);
}

// The main record's fields (format 1 with chunks inline, later formats with
// chunk counts, and from format 4 a flag on the small tensors).
void BuildMain(Checkpoint::Builder root, const CheckpointMetadata& meta,
               uint32_t version) {
  root.setFormatVersion(version);
  root.setId(meta.info.id);
  root.setHasStep(meta.info.step.has_value());
  root.setStep(meta.info.step.value_or(0));
  root.setHasTag(meta.info.tag.has_value());
  if (meta.info.tag) root.setTag(TextOf(*meta.info.tag));
  root.setCreated(meta.info.created);
  root.setWorldSize(meta.info.world_size);
  root.setNbytes(meta.info.nbytes);
  if (version != 1) {
    root.setHasNbytesWritten(true);
    root.setNbytesWritten(meta.info.nbytes_written);
    auto refs =
        root.initReferences(static_cast<unsigned>(meta.info.references.size()));
    for (unsigned i = 0; i < meta.info.references.size(); ++i)
      refs.set(i, meta.info.references[i]);
  }
  auto tensors = root.initTensors(static_cast<unsigned>(meta.tensors.size()));
  unsigned i = 0;
  PathsInKeyOrder paths(meta);
  for (const auto& [key, tensor] : meta.tensors) {
    auto t = tensors[i++];
    SetKeyAndPath(t, key, paths);
    t.setDtype(static_cast<uint8_t>(tensor.dtype));
    SetShape(
        t.initGlobalShape(static_cast<unsigned>(tensor.global_shape.size())),
        tensor.global_shape);
    if (version == 1) {
      SetChunksV1(t.initChunks(static_cast<unsigned>(tensor.chunks.size())),
                  tensor.chunks);
    } else {
      t.setChunkCount(tensor.chunks.size());
      if (IsSmall(tensor, version)) t.setChunksInGroup(true);
    }
  }
  SetValuesAndUserMetadata(root, meta);
}

// Words of a Text (or Data) of `bytes` bytes: its terminating NUL, padded
// to a word.
size_t TextWords(size_t bytes) { return (bytes + 1 + 7) / 8; }

// An upper bound on the main record's words (format 2 on), so that it is
// built in one segment: a reader follows a pointer into another segment
// through a lookup under a lock, which a record of 10,000 tensors paid on
// most of its pointers.
size_t MainRecordWords(const CheckpointMetadata& meta) {
  constexpr size_t kEntry = 8;  // a list element's struct, and spare
  size_t words = 64 + meta.info.references.size() +
                 TextWords(meta.info.tag.value_or("").size());
  for (const auto& [key, tensor] : meta.tensors)
    words += kEntry + TextWords(key.size()) + tensor.global_shape.size();
  // Every path and path kinds, of a tensor or a value.
  for (const auto& [key, path] : meta.flat_mapping) {
    words += path.size();
    for (const std::string& part : path) words += TextWords(part.size());
  }
  for (const auto& [key, kinds] : meta.path_kinds)
    words += TextWords(kinds.size());
  for (const auto& [key, value] : meta.values) {
    words += kEntry + TextWords(key.size());
    if (const auto* text = std::get_if<std::string>(&value))
      words += TextWords(text->size());
    else if (const auto* bytes = std::get_if<Bytes>(&value))
      words += TextWords(bytes->data.size());
    else if (const auto* big = std::get_if<BigInt>(&value))
      words += TextWords(big->digits.size());
  }
  for (const auto& [key, value] : meta.user_metadata)
    words += kEntry + TextWords(key.size()) + TextWords(value.size());
  return words;
}

// A first segment of `words`, within what a segment may hold (a record
// larger than that takes more segments).
unsigned FirstSegmentWords(size_t words) {
  return static_cast<unsigned>(std::min<size_t>(words, size_t{1} << 28));
}

std::string EncodeMain(const CheckpointMetadata& meta, uint32_t version) {
  capnp::MallocMessageBuilder message(
      FirstSegmentWords(version == 1 ? capnp::SUGGESTED_FIRST_SEGMENT_WORDS
                                     : MainRecordWords(meta)));
  BuildMain(message.initRoot<Checkpoint>(), meta, version);
  return ToBytes(message);
}

// The chunks of the `count` small tensors of `meta`, in key order, in one
// segment (see MainRecordWords).
std::string EncodeSmallTensors(const CheckpointMetadata& meta, uint32_t version,
                               size_t count) {
  // Every entry's chunks, one entry after another (each at most
  // kMaxSmallTensorChunks), and its boxes.
  struct Entry {
    size_t begin = 0, count = 0;
    std::string boxes;
  };
  std::vector<const ChunkMetadata*> chunks;
  chunks.reserve(count);  // one chunk each, mostly
  std::vector<Entry> entries;
  entries.reserve(count);
  size_t words = 16;
  for (const auto& [key, tensor] : meta.tensors) {
    if (!IsSmall(tensor, version)) continue;
    Entry& e = entries.emplace_back();
    e.begin = chunks.size();
    const auto sorted = AppendSortedChunks(tensor, &chunks);
    e.count = sorted.size();
    e.boxes = EncodeBoxStream(tensor.global_shape, sorted);
    // The entry's struct, boxes, checksums, hashes and holders.
    words += 8 + TextWords(e.boxes.size()) + 4 * e.count;
  }
  CKPTDB_ASSERT(entries.size() == count);
  capnp::MallocMessageBuilder message(FirstSegmentWords(words));
  auto r = message.initRoot<SmallTensors>();
  r.setFormatVersion(version);
  r.setCheckpointId(meta.info.id);
  auto list = r.initTensors(static_cast<unsigned>(count));
  for (unsigned i = 0; i < count; ++i) {
    const Entry& e = entries[i];
    SetChunks(
        list[i],
        std::span<const ChunkMetadata* const>(chunks).subspan(e.begin, e.count),
        e.boxes);
  }
  return ToBytes(message);
}
}  // namespace

std::vector<std::pair<std::string, std::string>> EncodeCheckpointRecords(
    const CheckpointMetadata& meta) {
  return EncodeCheckpointRecordsOfFormat(meta, kFormatVersion);
}

std::vector<std::pair<std::string, std::string>>
EncodeCheckpointRecordsOfFormat(const CheckpointMetadata& meta,
                                uint32_t version) {
  std::vector<std::pair<std::string, std::string>> records;
  size_t small = 0;
  for (const auto& entry : meta.tensors)
    small += IsSmall(entry.second, version);
  records.reserve(2 + meta.tensors.size() - small);
  records.emplace_back(MetaKey(meta.info.id), EncodeMain(meta, version));
  for (const auto& [key, tensor] : meta.tensors) {
    if (IsSmall(tensor, version)) continue;
    records.emplace_back(
        TensorRecordKey(meta.info.id, key),
        EncodeTensorRecord(meta.info.id, key, tensor, version));
  }
  if (small > 0) {
    records.emplace_back(SmallTensorsKey(meta.info.id),
                         EncodeSmallTensors(meta, version, small));
  }
  return records;
}

std::string EncodeCheckpointV1(const CheckpointMetadata& meta) {
  return EncodeMain(meta, 1);
}

}  // namespace ckptdb::storage
