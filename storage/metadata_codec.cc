// Decoding a checkpoint's records from untrusted bytes: every field checked
// before use, every defect Corruption naming what it is about. Encoding them
// is metadata_encode.cc's.
#include "storage/metadata_codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

#include "core/partition.h"
#include "core/sorted_maps.h"
#include "storage/box_stream.h"
#include "storage/checkpoint.capnp.h"
#include "storage/keys.h"

namespace ckptdb::storage {
namespace {

Status Bad(const std::string& what) {
  return Status::Corruption("checkpoint metadata: " + what);
}

// The shape in `list`; Corruption naming it `what` + `part` (joined only for
// an error).
Result<Shape> ReadShape(capnp::List<int64_t>::Reader list,
                        const ErrorName& what, std::string_view part) {
  auto name = [&] { return what + std::string(part); };
  if (list.size() > kMaxDims)
    return Bad(name() + " has " + std::to_string(list.size()) + " dims");
  Shape out;
  out.reserve(list.size());
  for (int64_t v : list) out.push_back(v);
  for (int64_t v : out) {
    if (v < 0 || v > kMaxExtent)
      return Bad(name() + " has extent " + std::to_string(v));
  }
  return out;
}

std::vector<std::string> ReadPath(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  for (auto part : list) out.emplace_back(part.cStr(), part.size());
  return out;
}

// True when `text` is an int in decimal as KeyText writes it.
bool IsIntText(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && std::to_string(value) == text;
}

// Corruption unless the kinds of `key`'s path parts (none in older records:
// every part a str key) match the stored path: one known kind a part, and an
// int in decimal for each part that is an int key or index. Reads the record
// in place, so that a read without paths checks them too.
Status CheckKinds(capnp::Data::Reader data,
                  capnp::List<capnp::Text>::Reader path,
                  const std::string& key) {
  if (data.size() == 0) return Status::OK();
  if (data.size() != path.size()) {
    return Bad("'" + key + "' has " + std::to_string(data.size()) +
               " path kinds for " + std::to_string(path.size()) + " parts");
  }
  for (unsigned i = 0; i < data.size(); ++i) {
    if (data[i] > static_cast<uint8_t>(PathPartKind::kTupleIndex))
      return Bad("'" + key + "' has path kind " + std::to_string(data[i]));
    const std::string_view part(path[i].cStr(), path[i].size());
    if (static_cast<PathPartKind>(data[i]) != PathPartKind::kStrKey &&
        !IsIntText(part))
      return Bad("'" + key + "' has an int path part '" + std::string(part) +
                 "'");
  }
  return Status::OK();
}

// Checks the kinds of `key`'s path parts (CheckKinds) and records them in
// meta->path_kinds when any are given.
Status ReadKinds(capnp::Data::Reader data,
                 capnp::List<capnp::Text>::Reader path, const std::string& key,
                 CheckpointMetadata* meta) {
  CKPTDB_RETURN_IF_ERROR(CheckKinds(data, path, key));
  if (data.size() == 0) return Status::OK();
  PathKinds kinds;
  for (uint8_t kind : data) kinds.push_back(static_cast<PathPartKind>(kind));
  if (!InsertNew(meta->path_kinds, key, std::move(kinds)))
    meta->path_kinds[key] = std::move(kinds);
  return Status::OK();
}

CheckpointInfo ReadInfo(Checkpoint::Reader r) {
  CheckpointInfo info;
  info.id = r.getId();
  if (r.getHasStep()) info.step = r.getStep();
  if (r.getHasTag())
    info.tag = std::string(r.getTag().cStr(), r.getTag().size());
  info.created = r.getCreated();
  info.world_size = r.getWorldSize();
  info.num_tensors = r.getTensors().size();
  info.nbytes = r.getNbytes();
  info.nbytes_written =
      r.getHasNbytesWritten() ? r.getNbytesWritten() : info.nbytes;
  for (int64_t id : r.getReferences()) info.references.push_back(id);
  return info;
}

// Runs fn(Root::Reader) over `bytes` (or an aligned copy, where they are not
// aligned to a word) with limits, mapping every Cap'n Proto exception to
// Corruption (starting with `record`, the record's name, when one is given).
template <typename T, typename Root, typename Fn>
Result<T> WithReader(std::string_view bytes, Fn&& fn,
                     const ErrorName& record = ErrorName("")) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return Bad((record.empty() ? std::string("record") : record.str()) +
               " of " + std::to_string(bytes.size()) +
               " bytes is not a whole message");
  }
  kj::ArrayPtr<const capnp::word> view(
      reinterpret_cast<const capnp::word*>(bytes.data()),
      bytes.size() / sizeof(capnp::word));
  kj::Array<capnp::word> copy;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(capnp::word) != 0) {
    copy = kj::heapArray<capnp::word>(view.size());
    std::memcpy(copy.begin(), bytes.data(), bytes.size());
    view = copy.asPtr();
  }
  capnp::ReaderOptions options;
  options.traversalLimitInWords = view.size() * 4 + 1024;
  options.nestingLimit = 16;
  std::optional<Result<T>> result;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    capnp::FlatArrayMessageReader reader(view, options);
    result.emplace(fn(reader.getRoot<Root>()));
  });
  KJ_IF_MAYBE (e, error) {
    return Bad((record.empty() ? std::string() : record + ": ") +
               std::string(e->getDescription().cStr()));
  }
  return std::move(*result);
}

Status CheckHeader(Checkpoint::Reader r) {
  if (r.getFormatVersion() < 1 || r.getFormatVersion() > kFormatVersion) {
    return Bad("format version " + std::to_string(r.getFormatVersion()) +
               " is not supported (this build reads 1 to " +
               std::to_string(kFormatVersion) + ")");
  }
  if (r.getId() <= 0) return Bad("id " + std::to_string(r.getId()));
  if (r.getWorldSize() <= 0)
    return Bad("world size " + std::to_string(r.getWorldSize()));
  if (r.getHasNbytesWritten() &&
      (r.getNbytesWritten() < 0 || r.getNbytesWritten() > r.getNbytes())) {
    return Bad("nbytes written " + std::to_string(r.getNbytesWritten()) +
               " outside [0, " + std::to_string(r.getNbytes()) + "]");
  }
  int64_t previous = 0;
  for (int64_t id : r.getReferences()) {
    if (id <= previous || id >= r.getId()) {
      return Bad("checkpoint " + std::to_string(r.getId()) +
                 " refers to checkpoint " + std::to_string(id) +
                 " (references must ascend below its own id)");
    }
    previous = id;
  }
  return Status::OK();
}

// One chunk's own fields: extents, recorded size, writer. Where it lies among
// the tensor's other chunks is CheckChunkLayout's.
Result<ChunkMetadata> ReadChunk(Chunk::Reader c, const ErrorName& what,
                                DType dtype, int32_t world_size) {
  ChunkMetadata chunk;
  CKPTDB_ASSIGN_OR_RETURN(
      chunk.box.origin, ReadShape(c.getGlobalOffset(), what, " chunk offset"));
  CKPTDB_ASSIGN_OR_RETURN(chunk.box.shape,
                          ReadShape(c.getLocalShape(), what, " chunk shape"));
  uint64_t elems = 0;
  if (!CheckedVolume(chunk.box.shape, 1, &elems))
    return Bad(what + " chunk is too large");
  chunk.writer_rank = c.getWriterRank();
  chunk.nbytes = c.getNbytes();
  chunk.checksum = c.getChecksum();
  if (chunk.nbytes != elems * DTypeSize(dtype)) {
    return Bad(what + " chunk at " + ShapeToString(chunk.box.origin) +
               " records " + std::to_string(chunk.nbytes) + " bytes for " +
               std::to_string(elems) + " elements");
  }
  if (chunk.writer_rank < 0 || chunk.writer_rank >= world_size) {
    return Bad(what + " chunk writer rank " +
               std::to_string(chunk.writer_rank));
  }
  return chunk;
}

// "chunk at [2, 0] of shape [2, 2] (writer rank 1)".
std::string ChunkName(const ChunkMetadata& c) {
  return "chunk at " + ShapeToString(c.box.origin) + " of shape " +
         ShapeToString(c.box.shape) + " (writer rank " +
         std::to_string(c.writer_rank) + ")";
}

Status LayoutError(const ErrorName& what, const Shape& global_shape,
                   const std::vector<ChunkMetadata>& chunks,
                   const planner::PartitionProblem& p) {
  using planner::PartitionError;
  if (p.error == PartitionError::kNone) return Status::OK();
  const std::string shape = ShapeToString(global_shape);
  switch (p.error) {
    case PartitionError::kNone:
      return Status::OK();
    case PartitionError::kBadShape:
      return Bad(what + " has shape " + shape);
    case PartitionError::kWrongRank:
      return Bad(what + " has a chunk of another rank than its shape " + shape +
                 ": " + ChunkName(chunks[p.box]));
    case PartitionError::kOutside:
      return Bad(what + " has a " + ChunkName(chunks[p.box]) +
                 " outside its shape " + shape);
    case PartitionError::kEmptyBox:
      return Bad(what + " has an empty " + ChunkName(chunks[p.box]));
    case PartitionError::kOverlap:
      return Bad(what + " " + shape + " has a " + ChunkName(chunks[p.box]) +
                 " and a " + ChunkName(chunks[p.other_box]) +
                 " that overlap in " + planner::BoxToString(p.overlap));
    case PartitionError::kGap:
      return Bad(
          what + " " + shape + " chunks hold " + std::to_string(p.covered) +
          " of " + std::to_string(p.total) + " elements" +
          (p.missing_element
               ? ", none holds element " + ShapeToString(*p.missing_element)
               : std::string()));
  }
  return Bad(what + " has a bad chunk layout");
}

// Checks that the chunks partition the tensor: each element stored once.
Status CheckChunkLayout(const ErrorName& what, const Shape& global_shape,
                        const std::vector<ChunkMetadata>& chunks) {
  // The boxes of a tensor of one chunk (most) without a vector for them.
  const Box* one = chunks.size() == 1 ? &chunks[0].box : nullptr;
  std::vector<const Box*> many;
  if (one == nullptr) many = planner::ChunkBoxes(chunks);
  return LayoutError(
      what, global_shape, chunks,
      planner::CheckPartitionOfPointers(
          global_shape, one != nullptr ? std::span<const Box* const>(&one, 1)
                                       : std::span<const Box* const>(many)));
}

Result<Value> ReadValue(SmallValue::Reader v, const std::string& key) {
  switch (v.which()) {
    case SmallValue::INT:
      return Value(v.getInt());
    case SmallValue::FLOAT:
      return Value(v.getFloat());
    case SmallValue::BOOL:
      return Value(v.getBool());
    case SmallValue::TEXT:
      return Value(std::string(v.getText().cStr(), v.getText().size()));
    case SmallValue::BYTES: {
      auto data = v.getBytes();
      return Value(Bytes{std::string(
          reinterpret_cast<const char*>(data.begin()), data.size())});
    }
    case SmallValue::NONE:
      return Value(None{});
    case SmallValue::BIG_INT: {
      BigInt big{std::string(v.getBigInt().cStr(), v.getBigInt().size())};
      if (!IsValidBigInt(big))
        return Bad("value '" + key + "' is an integer written as '" +
                   big.digits.substr(0, 64) +
                   "', not the decimal digits of one outside 64 bits");
      return Value(std::move(big));
    }
    default:
      return Bad("value '" + key + "' has an unknown type");
  }
}

// Sorts chunks by global offset (already sorted when written by this code).
void SortChunks(std::vector<ChunkMetadata>& chunks) {
  auto by_offset = [](const ChunkMetadata& a, const ChunkMetadata& b) {
    return a.box.origin < b.box.origin;
  };
  if (!std::is_sorted(chunks.begin(), chunks.end(), by_offset))
    std::sort(chunks.begin(), chunks.end(), by_offset);
}

// A tensor's dtype and global shape; *bytes is its volume in bytes.
Status ReadTensorHeader(Tensor::Reader t, const ErrorName& what,
                        TensorMetadata* tensor, uint64_t* bytes) {
  if (!IsValidDType(t.getDtype()))
    return Bad(what + " has dtype code " + std::to_string(t.getDtype()));
  tensor->dtype = static_cast<DType>(t.getDtype());
  CKPTDB_ASSIGN_OR_RETURN(tensor->global_shape,
                          ReadShape(t.getGlobalShape(), what, " shape"));
  if (!CheckedVolume(tensor->global_shape, DTypeSize(tensor->dtype), bytes))
    return Bad(what + " is too large");
  return Status::OK();
}

// Format 1: the tensor with its chunks inline.
Result<TensorMetadata> ReadTensorV1(Tensor::Reader t, const ErrorName& what,
                                    int32_t world_size) {
  TensorMetadata tensor;
  uint64_t bytes = 0;
  CKPTDB_RETURN_IF_ERROR(ReadTensorHeader(t, what, &tensor, &bytes));
  tensor.chunks.reserve(t.getChunks().size());
  for (auto c : t.getChunks()) {
    CKPTDB_ASSIGN_OR_RETURN(ChunkMetadata chunk,
                            ReadChunk(c, what, tensor.dtype, world_size));
    tensor.chunks.push_back(std::move(chunk));
  }
  CKPTDB_RETURN_IF_ERROR(
      CheckChunkLayout(what, tensor.global_shape, tensor.chunks));
  SortChunks(tensor.chunks);
  return tensor;
}

// Format 2: the tensor's header and chunk count; *bytes is its volume in
// bytes.
Status ReadTensorV2(Tensor::Reader t, const ErrorName& what,
                    TensorMetadata* tensor, uint64_t* count, uint64_t* bytes) {
  CKPTDB_RETURN_IF_ERROR(ReadTensorHeader(t, what, tensor, bytes));
  if (t.getChunks().size() != 0)
    return Bad(what + " has chunks inline in a format-2 record");
  *count = t.getChunkCount();
  // Chunks are non-empty boxes that partition the tensor.
  const uint64_t elems = *bytes / DTypeSize(tensor->dtype);
  if (elems == 0 ? *count != 0 : (*count == 0 || *count > elems)) {
    return Bad(what + " has " + std::to_string(*count) + " chunks for " +
               std::to_string(elems) + " elements");
  }
  return Status::OK();
}

Status ReadValuesAndUserMetadata(Checkpoint::Reader r, bool paths,
                                 CheckpointMetadata* meta) {
  for (auto v : r.getValues()) {
    std::string key(v.getKey().cStr(), v.getKey().size());
    CKPTDB_ASSIGN_OR_RETURN(Value value, ReadValue(v, key));
    if (v.getPath().size() == 0)
      return Bad("value '" + key + "' has an empty path");
    if (meta->tensors.count(key) ||
        !meta->values.emplace(key, std::move(value)).second) {
      return Bad("key '" + key + "' appears twice");
    }
    if (!paths) {
      CKPTDB_RETURN_IF_ERROR(CheckKinds(v.getPathKinds(), v.getPath(), key));
      continue;
    }
    CKPTDB_RETURN_IF_ERROR(ReadKinds(v.getPathKinds(), v.getPath(), key, meta));
    meta->flat_mapping[key] = ReadPath(v.getPath());
  }
  for (auto kv : r.getUserMetadata()) {
    meta->user_metadata[std::string(kv.getKey().cStr(), kv.getKey().size())] =
        std::string(kv.getValue().cStr(), kv.getValue().size());
  }
  return Status::OK();
}

// The content hashes and holders of a tensor record's chunks (both absent in
// records written before incremental saves); each holder must be one of the
// checkpoint's references.
Status ReadIncremental(TensorChunks::Reader r, const CheckpointInfo& info,
                       const ErrorName& what,
                       std::vector<ChunkMetadata>* chunks) {
  auto hashes = r.getHashes();
  auto holders = r.getHolders();
  if ((hashes.size() != 0 && hashes.size() != 16 * chunks->size()) ||
      (holders.size() != 0 && holders.size() != chunks->size())) {
    return Bad(what + " record holds " + std::to_string(hashes.size()) +
               " bytes of content hashes and " +
               std::to_string(holders.size()) + " holders for " +
               std::to_string(chunks->size()) + " chunks");
  }
  for (size_t i = 0; i < chunks->size() && hashes.size() != 0; ++i) {
    ContentHash h;
    std::memcpy(&h.low, hashes.begin() + 16 * i, 8);
    std::memcpy(&h.high, hashes.begin() + 16 * i + 8, 8);
    (*chunks)[i].content_hash = h;
  }
  for (unsigned i = 0; i < holders.size(); ++i) {
    const int64_t holder = holders[i];
    if (holder != 0 && !std::binary_search(info.references.begin(),
                                           info.references.end(), holder)) {
      return Bad(what + " chunk " + std::to_string(i) +
                 " is held by checkpoint " + std::to_string(holder) +
                 ", which the checkpoint's references do not name");
    }
    (*chunks)[i].holder_id = holder;
  }
  return Status::OK();
}

// The chunks of a TensorChunks message (a tensor's record, or its entry in
// the small tensors' record), `count` of them as the main record says,
// checked against the tensor; `what` names the tensor.
Result<std::vector<ChunkMetadata>> ReadChunks(TensorChunks::Reader r,
                                              const MainRecord& main,
                                              const ErrorName& what,
                                              const TensorMetadata& tensor,
                                              uint64_t count) {
  auto checksums = r.getChecksums();
  if (r.getChunkCount() != count || checksums.size() != count) {
    return Bad(what + " record holds " + std::to_string(r.getChunkCount()) +
               " chunks and " + std::to_string(checksums.size()) +
               " checksums; the main record says " + std::to_string(count));
  }
  std::vector<ChunkMetadata> chunks(count);
  auto boxes = r.getBoxes();
  CKPTDB_RETURN_IF_ERROR(DecodeBoxStream(
      std::string_view(reinterpret_cast<const char*>(boxes.begin()),
                       boxes.size()),
      tensor.global_shape, DTypeSize(tensor.dtype), main.meta.info.world_size,
      what, &chunks));
  for (unsigned i = 0; i < chunks.size(); ++i)
    chunks[i].checksum = checksums[i];
  CKPTDB_RETURN_IF_ERROR(ReadIncremental(r, main.meta.info, what, &chunks));
  CKPTDB_RETURN_IF_ERROR(CheckChunkLayout(what, tensor.global_shape, chunks));
  SortChunks(chunks);
  return chunks;
}

// The tensor record's chunks, checked against the main record.
Result<std::vector<ChunkMetadata>> ReadTensorRecord(
    TensorChunks::Reader r, const MainRecord& main, std::string_view key,
    const TensorMetadata& tensor, uint64_t count) {
  const ErrorName what = TensorName(key);
  if (r.getFormatVersion() != main.format_version) {
    return Bad(what + " record has format version " +
               std::to_string(r.getFormatVersion()) + ", its checkpoint's " +
               std::to_string(main.format_version));
  }
  if (r.getCheckpointId() != main.meta.info.id ||
      std::string_view(r.getKey().cStr(), r.getKey().size()) != key) {
    return Bad(what + " record belongs to tensor '" +
               std::string(r.getKey().cStr(), r.getKey().size()) +
               "' of checkpoint " + std::to_string(r.getCheckpointId()));
  }
  return ReadChunks(r, main, what, tensor, count);
}

Result<MainRecord> ReadMain(Checkpoint::Reader r, bool paths) {
  CKPTDB_RETURN_IF_ERROR(CheckHeader(r));
  MainRecord main;
  main.format_version = r.getFormatVersion();
  CheckpointMetadata& meta = main.meta;
  meta.info = ReadInfo(r);
  uint64_t total = 0;
  for (auto t : r.getTensors()) {
    std::string key(t.getKey().cStr(), t.getKey().size());
    const ErrorName what = TensorName(key);
    TensorMetadata tensor;
    uint64_t bytes = 0, count = 0;
    bool has_record = !main.has_chunks();
    if (main.has_chunks()) {
      CKPTDB_ASSIGN_OR_RETURN(tensor,
                              ReadTensorV1(t, what, meta.info.world_size));
      for (const ChunkMetadata& chunk : tensor.chunks) bytes += chunk.nbytes;
    } else {
      CKPTDB_RETURN_IF_ERROR(ReadTensorV2(t, what, &tensor, &count, &bytes));
      if (t.getChunksInGroup()) {
        if (main.format_version < 4) {
          return Bad(what +
                     " has its chunks with the small tensors in a "
                     "format-" +
                     std::to_string(main.format_version) + " checkpoint");
        }
        if (count > kMaxSmallTensorChunks) {
          return Bad(what + " has " + std::to_string(count) +
                     " chunks, too many for the small tensors' record");
        }
        has_record = false;
      }
    }
    if (__builtin_add_overflow(total, bytes, &total))
      return Bad("tensors hold more than 2^64 bytes");
    if (t.getPath().size() == 0) return Bad(what + " has an empty path");
    // From format 4 the small tensors' record follows the tensors' order,
    // which must be the map's.
    if (main.format_version >= 4 && !meta.tensors.empty() &&
        !(meta.tensors.rbegin()->first < key))
      return Bad(what + " is out of key order or appears twice");
    if (has_record) InsertNew(main.chunk_counts, key, count);
    if (main.format_version >= 4) {
      main.small.push_back(!has_record);
      if (!has_record) main.small_counts.push_back(count);
    }
    if (!paths) {
      CKPTDB_RETURN_IF_ERROR(CheckKinds(t.getPathKinds(), t.getPath(), key));
      if (!InsertNew(meta.tensors, std::move(key), std::move(tensor)))
        return Bad(what + " appears twice");
      continue;
    }
    if (!InsertNew(meta.tensors, key, std::move(tensor)))
      return Bad(what + " appears twice");
    CKPTDB_RETURN_IF_ERROR(
        ReadKinds(t.getPathKinds(), t.getPath(), key, &meta));
    // The key is unique among the tensors (above), and values come after.
    meta.flat_mapping.try_emplace(meta.flat_mapping.end(), std::move(key),
                                  ReadPath(t.getPath()));
  }
  if (total != static_cast<uint64_t>(meta.info.nbytes)) {
    return Bad((main.has_chunks() ? "chunks hold " : "tensors hold ") +
               std::to_string(total) + " bytes, the record says " +
               std::to_string(meta.info.nbytes));
  }
  CKPTDB_RETURN_IF_ERROR(ReadValuesAndUserMetadata(r, paths, &meta));
  return main;
}

}  // namespace

Result<MainRecord> DecodeMainRecord(std::string_view bytes, bool paths) {
  return WithReader<MainRecord, Checkpoint>(
      bytes, [paths](Checkpoint::Reader r) { return ReadMain(r, paths); });
}

Result<std::vector<ChunkMetadata>> DecodeTensorRecord(const MainRecord& main,
                                                      std::string_view key,
                                                      std::string_view bytes) {
  auto tensor = main.meta.tensors.find(std::string(key));
  if (main.has_chunks() || tensor == main.meta.tensors.end()) {
    return Bad("a record of tensor '" + std::string(key) +
               "', which checkpoint " + std::to_string(main.meta.info.id) +
               (main.has_chunks() ? " (format 1) keeps in its main record"
                                  : " does not have"));
  }
  return DecodeTensorRecord(main, *tensor, bytes);
}

Result<std::vector<ChunkMetadata>> DecodeTensorRecord(
    const MainRecord& main,
    const std::pair<const std::string, TensorMetadata>& tensor,
    std::string_view bytes) {
  const std::string& key = tensor.first;
  auto count = main.chunk_counts.find(key);
  if (main.has_chunks() || count == main.chunk_counts.end()) {
    return Bad("a record of tensor '" + key + "', whose chunks checkpoint " +
               std::to_string(main.meta.info.id) +
               (main.has_chunks() ? " keeps in its main record (format 1)"
                                  : " keeps with its small tensors"));
  }
  return WithReader<std::vector<ChunkMetadata>, TensorChunks>(
      bytes,
      [&](TensorChunks::Reader r) {
        return ReadTensorRecord(r, main, key, tensor.second, count->second);
      },
      ErrorName("tensor '", key, "' record"));
}

Status DecodeSmallTensors(MainRecord* main, std::string_view bytes,
                          const std::vector<std::string_view>* wanted) {
  const ErrorName what("the small tensors' record");
  Result<bool> read = WithReader<bool, SmallTensors>(
      bytes,
      [&](SmallTensors::Reader r) -> Result<bool> {
        if (r.getFormatVersion() != main->format_version) {
          return Bad(what + " has format version " +
                     std::to_string(r.getFormatVersion()) +
                     ", its checkpoint's " +
                     std::to_string(main->format_version));
        }
        if (r.getCheckpointId() != main->meta.info.id) {
          return Bad(what + " belongs to checkpoint " +
                     std::to_string(r.getCheckpointId()));
        }
        auto entries = r.getTensors();
        if (entries.size() != main->small_counts.size()) {
          return Bad(what + " holds " + std::to_string(entries.size()) +
                     " tensors; the main record has " +
                     std::to_string(main->small_counts.size()));
        }
        size_t ordinal = 0, entry = 0;
        auto asked = wanted ? wanted->begin()
                            : std::vector<std::string_view>::const_iterator();
        for (auto& [key, tensor] : main->meta.tensors) {
          if (!main->small[ordinal++]) continue;
          const size_t i = entry++;
          if (wanted) {
            while (asked != wanted->end() && *asked < key) ++asked;
            if (asked == wanted->end() || *asked != key) continue;
          }
          CKPTDB_ASSIGN_OR_RETURN(
              tensor.chunks,
              ReadChunks(entries[static_cast<unsigned>(i)], *main,
                         TensorName(key), tensor, main->small_counts[i]));
        }
        return true;
      },
      what);
  return read.status();
}

Status DecodeAllTensorRecords(
    MainRecord* main,
    const std::function<bool(std::string_view*, std::string_view*)>& next) {
  // The tensors that have records, and the tensors: all in key order, as the
  // records come; one walk over the three.
  auto expected = main->chunk_counts.begin();
  const auto end = main->chunk_counts.end();
  auto tensor = main->meta.tensors.begin();
  auto missing = [](const std::string& key) {
    return Bad("tensor '" + key + "' has no record: its chunks are missing");
  };
  std::string_view key, bytes;
  while (next(&key, &bytes)) {
    if (expected != end && expected->first < key)
      return missing(expected->first);
    if (expected == end || key < expected->first) {
      const bool known = main->meta.tensors.count(std::string(key)) != 0;
      return Bad("a record of tensor '" + std::string(key) + "', " +
                 (known ? "whose chunks the checkpoint keeps with its small "
                          "tensors"
                        : "which the checkpoint does not have"));
    }
    while (tensor->first < expected->first) ++tensor;
    CKPTDB_ASSIGN_OR_RETURN(tensor->second.chunks,
                            DecodeTensorRecord(*main, *tensor, bytes));
    ++expected;
  }
  return expected == end ? Status::OK() : missing(expected->first);
}

Result<CheckpointMetadata> DecodeCheckpointRecords(
    const std::vector<std::pair<std::string, std::string>>& records) {
  int64_t id = 0;
  if (records.empty() || !DecodeMetaKey(records[0].first, &id))
    return Bad("no main record");
  CKPTDB_ASSIGN_OR_RETURN(MainRecord main, DecodeMainRecord(records[0].second));
  if (main.meta.info.id != id) {
    return Bad("record at id " + std::to_string(id) + " claims id " +
               std::to_string(main.meta.info.id));
  }
  size_t i = 1;
  Status bad_key;
  int64_t small_id = 0;
  auto at_small = [&] {
    return i < records.size() &&
           DecodeSmallTensorsKey(records[i].first, &small_id) && small_id == id;
  };
  auto next = [&](std::string_view* key, std::string_view* bytes) {
    if (i == records.size() || at_small()) return false;
    int64_t record_id = 0;
    if (!DecodeTensorRecordKey(records[i].first, &record_id, key) ||
        record_id != id) {
      bad_key =
          Bad("record " + std::to_string(i) +
              " is not a tensor record of checkpoint " + std::to_string(id));
      return false;
    }
    *bytes = records[i++].second;
    return true;
  };
  if (main.has_chunks()) {
    std::string_view key, bytes;
    if (next(&key, &bytes))
      return Bad("a format-1 checkpoint with a tensor record");
  } else {
    Status s = DecodeAllTensorRecords(&main, next);
    CKPTDB_RETURN_IF_ERROR(bad_key);
    CKPTDB_RETURN_IF_ERROR(s);
  }
  CKPTDB_RETURN_IF_ERROR(bad_key);
  // Then the small tensors' record, when the main record has small tensors.
  if (at_small()) {
    if (main.small_counts.empty())
      return Bad("a small tensors' record for a checkpoint with none");
    CKPTDB_RETURN_IF_ERROR(
        DecodeSmallTensors(&main, records[i++].second, nullptr));
  } else if (!main.small_counts.empty()) {
    return Bad("the small tensors' record is missing: the chunks of " +
               std::to_string(main.small_counts.size()) + " tensors");
  }
  if (i != records.size()) {
    return Bad("record " + std::to_string(i) +
               " is not a record of checkpoint " + std::to_string(id));
  }
  return std::move(main.meta);
}

Result<CheckpointInfo> DecodeCheckpointInfo(std::string_view bytes) {
  return WithReader<CheckpointInfo, Checkpoint>(
      bytes, [](Checkpoint::Reader r) -> Result<CheckpointInfo> {
        CKPTDB_RETURN_IF_ERROR(CheckHeader(r));
        return ReadInfo(r);
      });
}

}  // namespace ckptdb::storage
