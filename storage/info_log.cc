#include "storage/info_log.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ckptdb::storage {
namespace {

constexpr uint64_t kRotateBytes = uint64_t{4} << 20;

class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

class FileLogger : public rocksdb::Logger {
 public:
  explicit FileLogger(std::unique_ptr<rocksdb::FSWritableFile> file)
      : file_(std::move(file)) {}
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
    }
  }

 protected:
  rocksdb::Status CloseImpl() override {
    std::lock_guard lock(mu_);
    CloseFile();
    return rocksdb::Status::OK();
  }

 private:
  void CloseFile() {
    if (file_)
      file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    file_.reset();
  }

  std::mutex mu_;
  std::unique_ptr<rocksdb::FSWritableFile> file_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewInfoLog(StoreFileSystem& fs,
                                            const std::string& dir) {
  const std::string path = dir + "/LOG";
  const rocksdb::IOOptions io;
  uint64_t size = 0;
  if (fs.GetFileSize(path, io, &size, nullptr).ok() && size > kRotateBytes) {
    fs.RenameFile(path, path + ".old", io, nullptr).PermitUncheckedError();
  }
  std::unique_ptr<rocksdb::FSWritableFile> file;
  if (!fs.ReopenWritableFile(path, rocksdb::FileOptions(), &file, nullptr)
           .ok()) {
    return NewNullInfoLog();
  }
  return std::make_shared<FileLogger>(std::move(file));
}

std::shared_ptr<rocksdb::Logger> NewNullInfoLog() {
  return std::make_shared<NullLogger>();
}

}  // namespace ckptdb::storage
