// Staged chunk files: one writer rank's chunks of one checkpoint, written
// with RocksDB's SstFileWriter into the store's staging directory, for
// Store::Commit to ingest.
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "storage/checksum.h"
#include "storage/keys.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;
namespace {

class StagedFileWriterImpl : public StagedFileWriter {
 public:
  StagedFileWriterImpl(std::string path, int64_t id, int32_t rank)
      : path_(std::move(path)), id_(id), rank_(rank) {
    rocksdb::Options options;
    static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
    // Written pages stay cached, as for any file write: a load soon after a
    // save reads them from memory.
    writer_ = std::make_unique<rocksdb::SstFileWriter>(
        rocksdb::EnvOptions(), options, /*column_family=*/nullptr,
        /*invalidate_page_cache=*/false);
  }
  ~StagedFileWriterImpl() override {
    if (!finished_) Abandon();
  }

  Status Open() {
    return FromRocks(writer_->Open(path_), "staging file " + path_);
  }

  Result<uint64_t> Add(std::string_view tensor_key, const Shape& global_offset,
                       std::string_view bytes) override {
    const uint64_t checksum = ChunkChecksum(bytes.data(), bytes.size());
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
      std::error_code ec;
      fs::remove(path_, ec);
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
    std::error_code ec;
    fs::remove(path_, ec);
  }

 private:
  std::string path_;
  int64_t id_;
  int32_t rank_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
  size_t entries_ = 0;
  bool finished_ = false;
};

}  // namespace

std::string StagingDir(const std::string& store_path) {
  return (fs::path(store_path) / "staging").string();
}

Result<std::unique_ptr<StagedFileWriter>> StagedFileWriter::Create(
    const std::string& store_path, int64_t checkpoint_id, int32_t rank,
    int part) {
  std::error_code ec;
  const std::string dir = StagingDir(store_path);
  fs::create_directories(dir, ec);
  if (ec)
    return Status::IOError("creating staging directory " + dir + ": " +
                           ec.message());
  const std::string path = (fs::path(dir) / (std::to_string(checkpoint_id) +
                                             "-" + std::to_string(rank) + "-" +
                                             std::to_string(part) + ".sst"))
                               .string();
  auto writer =
      std::make_unique<StagedFileWriterImpl>(path, checkpoint_id, rank);
  RETURN_IF_ERROR(writer->Open());
  return std::unique_ptr<StagedFileWriter>(std::move(writer));
}

}  // namespace ckptdb::storage
