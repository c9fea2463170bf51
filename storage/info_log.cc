#include "storage/info_log.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ckptdb::storage {
namespace {

class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

class FileLogger : public rocksdb::Logger {
 public:
  FileLogger(std::shared_ptr<StoreFileSystem> fs, std::string path,
             uint64_t max_bytes)
      : fs_(std::move(fs)), path_(std::move(path)), max_bytes_(max_bytes) {
    uint64_t size = 0;
    if (fs_->GetFileSize(path_, rocksdb::IOOptions(), &size, nullptr).ok())
      bytes_ = size;
    if (bytes_ >= max_bytes_) {
      Rotate();
    } else {
      Open();
    }
  }
  ~FileLogger() override { CloseFile(); }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    size_t n = std::strftime(line, sizeof(line), "%Y/%m/%d-%H:%M:%S ", &tm);
    const int body = std::vsnprintf(line + n, sizeof(line) - n - 1, format, ap);
    if (body < 0) return;
    n = std::min(sizeof(line) - 2, n + static_cast<size_t>(body));
    line[n++] = '\n';
    std::lock_guard lock(mu_);
    if (!file_) return;
    if (!file_->Append(rocksdb::Slice(line, n), rocksdb::IOOptions(), nullptr)
             .ok()) {
      CloseFile();
      return;
    }
    bytes_ += n;
    if (bytes_ >= max_bytes_) Rotate();
  }

 protected:
  rocksdb::Status CloseImpl() override {
    std::lock_guard lock(mu_);
    CloseFile();
    return rocksdb::Status::OK();
  }

 private:
  // LOG becomes LOG.old, and a new LOG is started. Without a rename, logging
  // stops (the file would otherwise only grow).
  void Rotate() {
    CloseFile();
    if (!fs_->RenameFile(path_, path_ + ".old", rocksdb::IOOptions(), nullptr)
             .ok())
      return;
    bytes_ = 0;
    Open();
  }
  void Open() {
    if (!fs_->ReopenWritableFile(path_, rocksdb::FileOptions(), &file_, nullptr)
             .ok())
      file_.reset();
  }
  void CloseFile() {
    if (file_)
      file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    file_.reset();
  }

  const std::shared_ptr<StoreFileSystem> fs_;
  const std::string path_;
  const uint64_t max_bytes_;
  std::mutex mu_;
  std::unique_ptr<rocksdb::FSWritableFile> file_;
  uint64_t bytes_ = 0;  // in the current LOG
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewInfoLog(std::shared_ptr<StoreFileSystem> fs,
                                            const std::string& dir,
                                            uint64_t max_bytes) {
  return std::make_shared<FileLogger>(std::move(fs), dir + "/LOG", max_bytes);
}

std::shared_ptr<rocksdb::Logger> NewNullInfoLog() {
  return std::make_shared<NullLogger>();
}

}  // namespace ckptdb::storage
