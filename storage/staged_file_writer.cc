// Staged chunk files: one writer rank's chunks of one checkpoint, written
// with RocksDB's SstFileWriter into the store's staging directory, for
// Store::Commit to ingest; the bytes of large chunks go to a value file
// (value_files.h), with a pointer in the table file.
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <cstdio>
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
#include "storage/value_files.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;
namespace {

class StagedFileWriterImpl : public StagedFileWriter {
 public:
  StagedFileWriterImpl(std::string path, const std::string& store_path,
                       int64_t id, int32_t rank, uint32_t part,
                       std::shared_ptr<StoreFileSystem> fs,
                       std::shared_ptr<rocksdb::Env> env)
      : path_(std::move(path)),
        id_(id),
        rank_(rank),
        fs_(std::move(fs)),
        env_(std::move(env)),
        values_(fs_, store_path, id, rank, part) {
    rocksdb::Options options;
    static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
    options.env = env_.get();
    // The table file holds keys, pointers and small chunks only.
    rocksdb::EnvOptions env_options;
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
    std::string pointer;
    rocksdb::Slice value(bytes.data(), bytes.size());
    if (bytes.size() >= kExternalValueBytes) {
      ASSIGN_OR_RETURN(const ValuePointer at, values_.Append(bytes));
      pointer = EncodeValuePointer(at);
      value = pointer;
    }
    RETURN_IF_ERROR(FromRocks(
        writer_->Put(key, value),
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
  std::string path_;
  int64_t id_;
  int32_t rank_;
  std::shared_ptr<StoreFileSystem> fs_;
  // Outlives writer_, which writes through it.
  std::shared_ptr<rocksdb::Env> env_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  ValueFileWriter values_;
  size_t entries_ = 0;
  bool finished_ = false;
};

}  // namespace

std::string StagingDir(const std::string& store_path) {
  return (fs::path(store_path) / "staging").string();
}

std::string StagedFileName(int64_t checkpoint_id, int32_t rank, int part) {
  return std::to_string(checkpoint_id) + "-" + std::to_string(rank) + "-" +
         std::to_string(part) + ".sst";
}

std::optional<StagedName> ParseStagedName(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  StagedName out;
  long long id = 0;
  int rank = 0, part = 0, used = 0;
  if (std::sscanf(name.c_str(), "%lld-%d-%d.sst%n", &id, &rank, &part, &used) !=
          3 ||
      static_cast<size_t>(used) != name.size() || rank < 0 || part < 0)
    return std::nullopt;
  out.checkpoint_id = id;
  out.rank = rank;
  out.part = static_cast<uint32_t>(part);
  return out;
}

Result<std::unique_ptr<StagedFileWriter>> StoreImpl::NewStagedFile(
    int64_t checkpoint_id, int32_t rank, int part) {
  std::shared_lock lock(mu_);
  RETURN_IF_ERROR(EnsureOpenShared(lock));
  const std::string dir = StagingDir(path_);
  RETURN_IF_ERROR(fs_->CreateDirIfMissing(dir));
  const std::string path =
      (fs::path(dir) / StagedFileName(checkpoint_id, rank, part)).string();
  auto writer = std::make_unique<StagedFileWriterImpl>(
      path, path_, checkpoint_id, rank, static_cast<uint32_t>(part), fs_, env_);
  RETURN_IF_ERROR(writer->Open());
  return std::unique_ptr<StagedFileWriter>(std::move(writer));
}

void StoreImpl::RemoveStaged(const std::vector<std::string>& staged_files) {
  std::shared_lock lock(mu_);
  // Best effort: a read-write open clears the staging directory, and the
  // value files of checkpoints without chunks, anyway.
  if (!fs_) return;
  for (const auto& file : staged_files) {
    (void)fs_->Remove(file);
    if (auto name = ParseStagedName(file)) {
      (void)fs_->Remove(
          ValueFilePath(path_, name->checkpoint_id, name->rank, name->part));
    }
  }
}

}  // namespace ckptdb::storage
