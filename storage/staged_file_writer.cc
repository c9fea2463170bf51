// Staged chunk files: one writer rank's chunks of one checkpoint, written
// with RocksDB's SstFileWriter into the store's staging directory, for
// Store::Commit to ingest.
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "storage/checksum.h"
#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;
namespace {

class StagedFileWriterImpl : public StagedFileWriter {
 public:
  StagedFileWriterImpl(std::string path, int64_t id, int32_t rank,
                       std::shared_ptr<StoreFileSystem> fs,
                       std::shared_ptr<rocksdb::Env> env)
      : path_(std::move(path)),
        id_(id),
        rank_(rank),
        fs_(std::move(fs)),
        env_(std::move(env)) {
    rocksdb::Options options;
    static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
    options.env = env_.get();
    // Blocks larger than the write buffer go to the file straight from the
    // table builder. RocksDB's default (1 MiB) would copy every chunk's block
    // once more, into the buffer, before writing it.
    rocksdb::EnvOptions env_options;
    env_options.writable_file_max_buffer_size = kOwnBlockBytes;
    // Write-back starts every few MiB (sync_file_range), while later chunks
    // are still hashed and written, so that the sync at Finish waits for
    // little more than the last few MiB. It makes nothing durable by itself.
    env_options.bytes_per_sync = 4 << 20;
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
    const uint64_t checksum = known_checksum
                                  ? *known_checksum
                                  : ChunkChecksum(bytes.data(), bytes.size());
    const std::string key =
        EncodeChunkKey(id_, rank_, tensor_key, global_offset);
    RETURN_IF_ERROR(FromRocks(
        writer_->Put(key, rocksdb::Slice(bytes.data(), bytes.size())),
        "staging chunk of '" + std::string(tensor_key) + "' into " + path_));
    ++entries_;
    return checksum;
  }

  Result<std::string> Finish() override {
    finished_ = true;
    if (entries_ == 0) {
      writer_.reset();
      RETURN_IF_ERROR(fs_->Remove(path_));
      return std::string();
    }
    Status s = FromRocks(writer_->Finish(), "finishing staged file " + path_);
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
  }

 private:
  std::string path_;
  int64_t id_;
  int32_t rank_;
  std::shared_ptr<StoreFileSystem> fs_;
  // Outlives writer_, which writes through it.
  std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  size_t entries_ = 0;
  bool finished_ = false;
};

}  // namespace

std::string StagingDir(const std::string& store_path) {
  return (fs::path(store_path) / "staging").string();
}

Result<std::unique_ptr<StagedFileWriter>> StoreImpl::NewStagedFile(
    int64_t checkpoint_id, int32_t rank, int part) {
  std::shared_lock lock(mu_);
  RETURN_IF_ERROR(EnsureOpenShared(lock));
  const std::string dir = StagingDir(path_);
  RETURN_IF_ERROR(fs_->CreateDirIfMissing(dir));
  const std::string path = (fs::path(dir) / (std::to_string(checkpoint_id) +
                                             "-" + std::to_string(rank) + "-" +
                                             std::to_string(part) + ".sst"))
                               .string();
  auto writer = std::make_unique<StagedFileWriterImpl>(path, checkpoint_id,
                                                       rank, fs_, env_);
  RETURN_IF_ERROR(writer->Open());
  return std::unique_ptr<StagedFileWriter>(std::move(writer));
}

void StoreImpl::RemoveStaged(const std::vector<std::string>& staged_files) {
  std::shared_lock lock(mu_);
  // Best effort: a read-write open clears the staging directory anyway.
  if (!fs_) return;
  for (const auto& file : staged_files) (void)fs_->Remove(file);
}

}  // namespace ckptdb::storage
