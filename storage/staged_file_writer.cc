#include "storage/staged_file_writer.h"

#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/checksum.h"
#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/store_impl.h"
#include "storage/value_files.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;

std::vector<size_t> ChunkWriteOrder(std::span<const ChunkToWrite> chunks) {
  std::vector<size_t> order(chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // The keys of one writer of one checkpoint sort as their tensor keys, then
  // their offsets, do (EncodeChunkKey: the escaping keeps the order of the
  // tensor keys, and the offsets are big-endian). A plan lists its chunks by
  // tensor key and offset: mostly in key order already, checked in one pass.
  auto by_key = [&](size_t a, size_t b) {
    const int keys = chunks[a].tensor_key.compare(chunks[b].tensor_key);
    return keys != 0 ? keys < 0 : *chunks[a].origin < *chunks[b].origin;
  };
  if (!std::is_sorted(order.begin(), order.end(), by_key))
    std::sort(order.begin(), order.end(), by_key);
  return order;
}

namespace {

// The buffer of a staged table file's writer: a quarter of a block of small
// chunks, so that such a block never goes through it.
constexpr size_t kTableWriteBufferBytes = size_t{64} << 10;

class StagedFileWriterImpl : public StagedFileWriter {
 public:
  StagedFileWriterImpl(std::string path, const std::string& store_path,
                       int64_t id, int32_t rank, uint32_t part,
                       bool value_files, std::shared_ptr<StoreFileSystem> fs,
                       std::shared_ptr<rocksdb::Env> env)
      : path_(std::move(path)),
        id_(id),
        rank_(rank),
        fs_(std::move(fs)),
        env_(std::move(env)),
        value_files_(value_files),
        values_(fs_, store_path, id, rank, part) {
    rocksdb::Options options;
    static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
    options.env = env_.get();
    // This writer's collector learns from it which values are pointers.
    log_->name = values_.name();
    options.table_properties_collector_factories = {
        NewValueOffsetCollectorFactory(log_)};
    // The table file holds keys, pointers and small chunks only.
    rocksdb::EnvOptions env_options;
    // Blocks of small chunks (ChunkCfOptions' block size) larger than the
    // writer's buffer go to the file straight from the table builder, not
    // through a copy into the buffer first (a state of many small tensors
    // crossed memory once more for it); the buffer gathers the rest (a
    // block's trailer, the index, filter and property blocks).
    env_options.writable_file_max_buffer_size = kTableWriteBufferBytes;
    // Written pages stay cached, as for any file write: a load soon after a
    // save reads them from memory.
    writer_ = std::make_unique<rocksdb::SstFileWriter>(
        env_options, options, /*column_family=*/nullptr,
        /*invalidate_page_cache=*/false);
  }
  ~StagedFileWriterImpl() override {
    if (!finished_) Abandon();
  }

  Status Open() {
    return FromRocks(writer_->Open(path_), "staging file " + path_);
  }

  Result<uint64_t> Add(std::string_view tensor_key, const Shape& global_offset,
                       std::string_view bytes,
                       std::optional<uint64_t> known_checksum) override {
    if (GoesToValueFile(bytes) && !known_checksum) {
      ChunkDigest digest;
      CKPTDB_ASSIGN_OR_RETURN(
          const ValuePointer at,
          values_.AppendHashing(bytes, /*content=*/false, &digest));
      CKPTDB_RETURN_IF_ERROR(PutPointer(tensor_key, global_offset, at));
      return digest.checksum;
    }
    const uint64_t checksum = known_checksum
                                  ? *known_checksum
                                  : ChunkChecksum(bytes.data(), bytes.size());
    if (GoesToValueFile(bytes)) {
      CKPTDB_ASSIGN_OR_RETURN(const ValuePointer at, values_.Append(bytes));
      CKPTDB_RETURN_IF_ERROR(PutPointer(tensor_key, global_offset, at));
    } else {
      CKPTDB_RETURN_IF_ERROR(Put(tensor_key, global_offset, bytes));
    }
    return checksum;
  }

  Result<Added> AddUnlessUnchanged(
      std::string_view tensor_key, const Shape& global_offset,
      std::string_view bytes,
      const std::function<bool(const ContentHash&)>& unchanged) override {
    Added out;
    if (!GoesToValueFile(bytes)) {
      out.digest = ChunkChecksumAndContentHash(bytes.data(), bytes.size());
      if (unchanged(out.digest.content)) return out;
      CKPTDB_RETURN_IF_ERROR(Put(tensor_key, global_offset, bytes));
      out.added = true;
      return out;
    }
    CKPTDB_ASSIGN_OR_RETURN(
        const ValuePointer at,
        values_.AppendHashing(bytes, /*content=*/true, &out.digest));
    if (unchanged(out.digest.content)) {
      CKPTDB_RETURN_IF_ERROR(values_.DropLast(at));
      return out;
    }
    CKPTDB_RETURN_IF_ERROR(PutPointer(tensor_key, global_offset, at));
    out.added = true;
    return out;
  }

  Result<std::string> Finish() override {
    finished_ = true;
    if (entries_ == 0) {
      writer_.reset();
      // A value file holds no bytes then (every chunk was dropped): gone too.
      CKPTDB_RETURN_IF_ERROR(values_.Finish());
      CKPTDB_RETURN_IF_ERROR(fs_->Remove(path_));
      return std::string();
    }
    // The values first: the table file names them.
    Status s = values_.Finish();
    if (s.ok())
      s = FromRocks(writer_->Finish(), "finishing staged file " + path_);
    if (!s.ok()) {
      Abandon();
      return s;
    }
    return path_;
  }

  void Abandon() override {
    finished_ = true;
    writer_.reset();
    (void)fs_->Remove(path_);
    values_.Abandon();
  }

 private:
  bool GoesToValueFile(std::string_view bytes) const {
    return value_files_ && bytes.size() >= kExternalValueBytes;
  }

  // Puts the chunk's key with `value`: its bytes, or a pointer to them.
  Status Put(std::string_view tensor_key, const Shape& global_offset,
             std::string_view value) {
    key_.clear();
    AppendChunkKey(id_, rank_, tensor_key, global_offset, &key_);
    const rocksdb::Status put =
        writer_->Put(key_, rocksdb::Slice(value.data(), value.size()));
    if (!put.ok()) {
      return FromRocks(put, "staging chunk of '" + std::string(tensor_key) +
                                "' into " + path_);
    }
    ++entries_;
    return Status::OK();
  }

  // Puts a pointer to bytes appended to the value file; the table's collector
  // learns from log_ that this value is one.
  Status PutPointer(std::string_view tensor_key, const Shape& global_offset,
                    const ValuePointer& at) {
    log_->end = at.offset + at.nbytes;
    log_->next_offset = at.offset;
    log_->next_is_pointer = true;
    const Status put = Put(tensor_key, global_offset, EncodeValuePointer(at));
    log_->next_is_pointer = false;
    return put;
  }

  std::string path_;
  int64_t id_;
  int32_t rank_;
  std::shared_ptr<StoreFileSystem> fs_;
  // Outlives writer_, which writes through it.
  std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  const bool value_files_;
  ValueFileWriter values_;
  const std::shared_ptr<ValueFileLog> log_ = std::make_shared<ValueFileLog>();
  size_t entries_ = 0;
  bool finished_ = false;
  // The key Put encodes, its room kept from chunk to chunk.
  std::string key_;
};

}  // namespace

std::string StagedFileName(int64_t checkpoint_id, int32_t rank, int part) {
  return std::to_string(checkpoint_id) + "-" + std::to_string(rank) + "-" +
         std::to_string(part) + ".sst";
}

Result<std::unique_ptr<StagedFileWriter>> OpenStagedFileWriter(
    const std::string& path, const std::string& store_path,
    int64_t checkpoint_id, int32_t rank, uint32_t part, bool value_files,
    std::shared_ptr<StoreFileSystem> fs, std::shared_ptr<rocksdb::Env> env) {
  auto writer = std::make_unique<StagedFileWriterImpl>(
      path, store_path, checkpoint_id, rank, part, value_files, std::move(fs),
      std::move(env));
  CKPTDB_RETURN_IF_ERROR(writer->Open());
  return std::unique_ptr<StagedFileWriter>(std::move(writer));
}

std::string StagingDir(const std::string& store_path) {
  return (fs::path(store_path) / "staging").string();
}

Result<std::unique_ptr<StagedFileWriter>> StoreImpl::NewStagedFile(
    int64_t checkpoint_id, int32_t rank, int part) {
  // Writes files only: a handle closed by Release stays closed.
  CKPTDB_RETURN_IF_ERROR(AtItsPath("saving"));
  std::shared_lock lock(mu_);
  const std::string dir = StagingDir(path_);
  CKPTDB_RETURN_IF_ERROR(fs_->CreateDirIfMissing(dir));
  const std::string path =
      (fs::path(dir) / StagedFileName(checkpoint_id, rank, part)).string();
  return OpenStagedFileWriter(path, path_, checkpoint_id, rank,
                              static_cast<uint32_t>(part), options_.value_files,
                              fs_, env_);
}

void StoreImpl::RemoveStaged(const std::vector<std::string>& staged_files) {
  std::shared_lock lock(mu_);
  // Best effort: a read-write open clears the staging directory anyway. The
  // save's value files stay: it may have committed after all (an error that
  // cannot tell); the next save's NextCheckpointId, or a read-write open,
  // removes them once no table file holds the checkpoint's keys.
  if (!fs_) return;
  for (const auto& file : staged_files) (void)fs_->Remove(file);
}

}  // namespace ckptdb::storage
