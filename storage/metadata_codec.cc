#include "storage/metadata_codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cstring>

#include "planner/partition.h"
#include "storage/checkpoint.capnp.h"

namespace ckptdb::storage {
namespace {

constexpr size_t kMaxDims = 32;
constexpr int64_t kMaxExtent = int64_t{1} << 48;

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

// Sets a tensor's or value's flat key and its path from the flat mapping.
template <typename Builder>
void SetKeyAndPath(
    Builder builder, const std::string& key,
    const std::map<std::string, std::vector<std::string>>& mapping) {
  builder.setKey(TextOf(key));
  auto path = mapping.find(key);
  if (path != mapping.end()) {
    SetPath(builder.initPath(static_cast<unsigned>(path->second.size())),
            path->second);
  }
}

Status Bad(const std::string& what) {
  return Status::Corruption("checkpoint metadata: " + what);
}

Result<Shape> ReadShape(capnp::List<int64_t>::Reader list,
                        const std::string& what) {
  if (list.size() > kMaxDims)
    return Bad(what + " has " + std::to_string(list.size()) + " dims");
  Shape out;
  out.reserve(list.size());
  for (int64_t v : list) out.push_back(v);
  for (int64_t v : out) {
    if (v < 0 || v > kMaxExtent)
      return Bad(what + " has extent " + std::to_string(v));
  }
  return out;
}

std::vector<std::string> ReadPath(capnp::List<capnp::Text>::Reader list) {
  std::vector<std::string> out;
  for (auto part : list) out.emplace_back(part.cStr(), part.size());
  return out;
}

// Multiplies extents, failing on overflow past 2^62.
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
  return info;
}

// Runs fn(Checkpoint::Reader) over an aligned copy of `bytes` with limits,
// mapping every Cap'n Proto exception to Corruption.
template <typename T, typename Fn>
Result<T> WithReader(std::string_view bytes, Fn&& fn) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return Bad("record of " + std::to_string(bytes.size()) +
               " bytes is not a whole message");
  }
  kj::Array<capnp::word> words =
      kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * 4 + 1024;
  options.nestingLimit = 16;
  Result<T> result = Status::Internal("unreachable");
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    capnp::FlatArrayMessageReader reader(words.asPtr(), options);
    result = fn(reader.getRoot<Checkpoint>());
  });
  KJ_IF_MAYBE (e, error) {
    return Bad(std::string(e->getDescription().cStr()));
  }
  return result;
}

Status CheckHeader(Checkpoint::Reader r) {
  if (r.getFormatVersion() != kFormatVersion) {
    return Bad("format version " + std::to_string(r.getFormatVersion()) +
               " is not supported (" + std::to_string(kFormatVersion) + " is)");
  }
  if (r.getId() <= 0) return Bad("id " + std::to_string(r.getId()));
  if (r.getWorldSize() <= 0)
    return Bad("world size " + std::to_string(r.getWorldSize()));
  return Status::OK();
}

// One chunk's own fields: extents, recorded size, writer. Where it lies among
// the tensor's other chunks is CheckChunkLayout's.
Result<ChunkMetadata> ReadChunk(Chunk::Reader c, const std::string& what,
                                DType dtype, int32_t world_size) {
  ChunkMetadata chunk;
  ASSIGN_OR_RETURN(chunk.global_offset,
                   ReadShape(c.getGlobalOffset(), what + " chunk offset"));
  ASSIGN_OR_RETURN(chunk.local_shape,
                   ReadShape(c.getLocalShape(), what + " chunk shape"));
  uint64_t elems = 0;
  if (!CheckedVolume(chunk.local_shape, 1, &elems))
    return Bad(what + " chunk is too large");
  chunk.writer_rank = c.getWriterRank();
  chunk.nbytes = c.getNbytes();
  chunk.checksum = c.getChecksum();
  if (chunk.nbytes != elems * DTypeSize(dtype)) {
    return Bad(what + " chunk at " + ShapeToString(chunk.global_offset) +
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
  return "chunk at " + ShapeToString(c.global_offset) + " of shape " +
         ShapeToString(c.local_shape) + " (writer rank " +
         std::to_string(c.writer_rank) + ")";
}

Status LayoutError(const std::string& what, const Shape& global_shape,
                   const std::vector<ChunkMetadata>& chunks,
                   const planner::PartitionProblem& p) {
  using planner::PartitionError;
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
Status CheckChunkLayout(const std::string& what, const Shape& global_shape,
                        std::vector<ChunkMetadata>& chunks) {
  // The boxes borrow the chunks' extents for the check.
  std::vector<planner::Box> boxes(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    boxes[i].offset = std::move(chunks[i].global_offset);
    boxes[i].shape = std::move(chunks[i].local_shape);
  }
  const planner::PartitionProblem problem =
      planner::CheckPartition(global_shape, boxes);
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i].global_offset = std::move(boxes[i].offset);
    chunks[i].local_shape = std::move(boxes[i].shape);
  }
  return LayoutError(what, global_shape, chunks, problem);
}

Result<TensorMetadata> ReadTensor(Tensor::Reader t, const std::string& what,
                                  int32_t world_size) {
  if (!IsValidDType(t.getDtype()))
    return Bad(what + " has dtype code " + std::to_string(t.getDtype()));
  TensorMetadata tensor;
  tensor.dtype = static_cast<DType>(t.getDtype());
  ASSIGN_OR_RETURN(tensor.global_shape,
                   ReadShape(t.getGlobalShape(), what + " shape"));
  uint64_t tensor_elems = 0;
  if (!CheckedVolume(tensor.global_shape, 1, &tensor_elems))
    return Bad(what + " is too large");
  tensor.chunks.reserve(t.getChunks().size());
  for (auto c : t.getChunks()) {
    ASSIGN_OR_RETURN(ChunkMetadata chunk,
                     ReadChunk(c, what, tensor.dtype, world_size));
    tensor.chunks.push_back(std::move(chunk));
  }
  RETURN_IF_ERROR(CheckChunkLayout(what, tensor.global_shape, tensor.chunks));
  std::sort(tensor.chunks.begin(), tensor.chunks.end(),
            [](const ChunkMetadata& a, const ChunkMetadata& b) {
              return a.global_offset < b.global_offset;
            });
  return tensor;
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
    default:
      return Bad("value '" + key + "' has an unknown type");
  }
}

Result<CheckpointMetadata> ReadAll(Checkpoint::Reader r) {
  RETURN_IF_ERROR(CheckHeader(r));
  CheckpointMetadata meta;
  meta.info = ReadInfo(r);
  uint64_t total = 0;
  for (auto t : r.getTensors()) {
    std::string key(t.getKey().cStr(), t.getKey().size());
    const std::string what = "tensor '" + key + "'";
    ASSIGN_OR_RETURN(TensorMetadata tensor,
                     ReadTensor(t, what, meta.info.world_size));
    for (const ChunkMetadata& chunk : tensor.chunks) total += chunk.nbytes;
    auto path = ReadPath(t.getPath());
    if (path.empty()) return Bad(what + " has an empty path");
    if (!meta.tensors.emplace(key, std::move(tensor)).second)
      return Bad(what + " appears twice");
    meta.flat_mapping[key] = std::move(path);
  }
  if (total != static_cast<uint64_t>(meta.info.nbytes)) {
    return Bad("chunks hold " + std::to_string(total) +
               " bytes, the record says " + std::to_string(meta.info.nbytes));
  }
  for (auto v : r.getValues()) {
    std::string key(v.getKey().cStr(), v.getKey().size());
    ASSIGN_OR_RETURN(Value value, ReadValue(v, key));
    auto path = ReadPath(v.getPath());
    if (path.empty()) return Bad("value '" + key + "' has an empty path");
    if (meta.tensors.count(key) ||
        !meta.values.emplace(key, std::move(value)).second) {
      return Bad("key '" + key + "' appears twice");
    }
    meta.flat_mapping[key] = std::move(path);
  }
  for (auto kv : r.getUserMetadata()) {
    meta.user_metadata[std::string(kv.getKey().cStr(), kv.getKey().size())] =
        std::string(kv.getValue().cStr(), kv.getValue().size());
  }
  return meta;
}

}  // namespace

std::string EncodeCheckpoint(const CheckpointMetadata& meta) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<Checkpoint>();
  root.setFormatVersion(kFormatVersion);
  root.setId(meta.info.id);
  root.setHasStep(meta.info.step.has_value());
  root.setStep(meta.info.step.value_or(0));
  root.setHasTag(meta.info.tag.has_value());
  if (meta.info.tag) root.setTag(TextOf(*meta.info.tag));
  root.setCreated(meta.info.created);
  root.setWorldSize(meta.info.world_size);
  root.setNbytes(meta.info.nbytes);
  auto tensors = root.initTensors(static_cast<unsigned>(meta.tensors.size()));
  unsigned i = 0;
  for (const auto& [key, tensor] : meta.tensors) {
    auto t = tensors[i++];
    SetKeyAndPath(t, key, meta.flat_mapping);
    t.setDtype(static_cast<uint8_t>(tensor.dtype));
    SetShape(
        t.initGlobalShape(static_cast<unsigned>(tensor.global_shape.size())),
        tensor.global_shape);
    auto chunks = t.initChunks(static_cast<unsigned>(tensor.chunks.size()));
    for (unsigned c = 0; c < tensor.chunks.size(); ++c) {
      const ChunkMetadata& chunk = tensor.chunks[c];
      auto cb = chunks[c];
      SetShape(cb.initGlobalOffset(
                   static_cast<unsigned>(chunk.global_offset.size())),
               chunk.global_offset);
      SetShape(
          cb.initLocalShape(static_cast<unsigned>(chunk.local_shape.size())),
          chunk.local_shape);
      cb.setWriterRank(chunk.writer_rank);
      cb.setNbytes(chunk.nbytes);
      cb.setChecksum(chunk.checksum);
    }
  }
  auto values = root.initValues(static_cast<unsigned>(meta.values.size()));
  i = 0;
  for (const auto& [key, value] : meta.values) {
    auto v = values[i++];
    SetKeyAndPath(v, key, meta.flat_mapping);
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
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()),
                     bytes.size());
}

Result<CheckpointMetadata> DecodeCheckpoint(std::string_view bytes) {
  return WithReader<CheckpointMetadata>(bytes, ReadAll);
}

Result<CheckpointInfo> DecodeCheckpointInfo(std::string_view bytes) {
  return WithReader<CheckpointInfo>(
      bytes, [](Checkpoint::Reader r) -> Result<CheckpointInfo> {
        RETURN_IF_ERROR(CheckHeader(r));
        return ReadInfo(r);
      });
}

}  // namespace ckptdb::storage
