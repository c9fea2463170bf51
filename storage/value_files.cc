#include "storage/value_files.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <system_error>
#include <utility>

#include "core/little_endian.h"
#include "core/thread_priority.h"

namespace ckptdb::storage {
namespace fs = std::filesystem;
namespace {

// "CKV1", little-endian, at the start of every pointer.
constexpr uint32_t kPointerMagic = 0x31564b43;
// Write-back of a value file starts every this many bytes (sync_file_range),
// while later chunks are still hashed and written, so that the sync at Finish
// waits for little more than the last few MiB. It makes nothing durable.
constexpr uint64_t kWriteBackBytes = uint64_t{4} << 20;

}  // namespace

std::string EncodeValuePointer(const ValuePointer& pointer) {
  std::string out;
  out.reserve(kValuePointerBytes);
  PutLittleEndian<uint32_t>(&out, kPointerMagic);
  PutLittleEndian<uint32_t>(&out, static_cast<uint32_t>(pointer.rank));
  PutLittleEndian<uint32_t>(&out, pointer.part);
  PutLittleEndian<uint32_t>(&out, pointer.nonce);
  PutLittleEndian<uint64_t>(&out, pointer.offset);
  PutLittleEndian<uint64_t>(&out, pointer.nbytes);
  return out;
}

std::optional<ValuePointer> DecodeValuePointer(std::string_view value) {
  if (value.size() != kValuePointerBytes) return std::nullopt;
  const char* p = value.data();
  if (GetLittleEndian<uint32_t>(p) != kPointerMagic) return std::nullopt;
  ValuePointer pointer;
  pointer.rank = static_cast<int32_t>(GetLittleEndian<uint32_t>(p + 4));
  pointer.part = GetLittleEndian<uint32_t>(p + 8);
  pointer.nonce = GetLittleEndian<uint32_t>(p + 12);
  pointer.offset = GetLittleEndian<uint64_t>(p + 16);
  pointer.nbytes = GetLittleEndian<uint64_t>(p + 24);
  if (pointer.rank < 0 || pointer.offset + pointer.nbytes < pointer.offset)
    return std::nullopt;
  return pointer;
}

std::string ValuesDir(const std::string& store_path) {
  return (fs::path(store_path) / "values").string();
}

std::string ValueDirOf(const std::string& store_path, int64_t checkpoint_id) {
  return (fs::path(ValuesDir(store_path)) / std::to_string(checkpoint_id))
      .string();
}

std::string ValueFileName(int64_t checkpoint_id, const ValuePointer& pointer) {
  char nonce[9];
  std::snprintf(nonce, sizeof(nonce), "%08x", pointer.nonce);
  return std::to_string(checkpoint_id) + "/" + std::to_string(pointer.rank) +
         "-" + std::to_string(pointer.part) + "-" + nonce + ".val";
}

std::string ValueFilePath(const std::string& store_path, int64_t checkpoint_id,
                          const ValuePointer& pointer) {
  return (fs::path(ValuesDir(store_path)) /
          ValueFileName(checkpoint_id, pointer))
      .string();
}

bool ParseValueDirName(std::string_view name, int64_t* checkpoint_id) {
  if (name.empty() || name.size() > 18 ||
      name.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  const auto [end, ec] =
      std::from_chars(name.data(), name.data() + name.size(), *checkpoint_id);
  return ec == std::errc() && end == name.data() + name.size() &&
         *checkpoint_id > 0;
}

std::optional<ValuePointer> ParseValueFileName(std::string_view name,
                                               int64_t* checkpoint_id) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos ||
      !ParseValueDirName(name.substr(0, slash), checkpoint_id) ||
      !name.ends_with(".val"))
    return std::nullopt;
  std::string_view rest = name.substr(slash + 1, name.size() - slash - 5);
  // <rank>-<part>-<nonce, 8 hex digits>, each number in its shortest form.
  auto number = [&rest](auto* out, int base, bool last) {
    const size_t end = last ? rest.size() : rest.find('-');
    if (end == 0 || end == std::string_view::npos) return false;
    const std::string_view digits = rest.substr(0, end);
    const auto [stop, ec] = std::from_chars(
        digits.data(), digits.data() + digits.size(), *out, base);
    rest.remove_prefix(last ? end : end + 1);
    return ec == std::errc() && stop == digits.data() + digits.size();
  };
  ValuePointer pointer;
  uint32_t rank = 0;
  if (!number(&rank, 10, false) || !number(&pointer.part, 10, false) ||
      rest.size() != 8 || !number(&pointer.nonce, 16, true) ||
      rank > uint32_t{INT32_MAX})
    return std::nullopt;
  pointer.rank = static_cast<int32_t>(rank);
  if (ValueFileName(*checkpoint_id, pointer) != name) return std::nullopt;
  return pointer;
}

ValueFileWriter::ValueFileWriter(std::shared_ptr<StoreFileSystem> fs,
                                 std::string store_path, int64_t checkpoint_id,
                                 int32_t rank, uint32_t part)
    : fs_(std::move(fs)),
      store_path_(std::move(store_path)),
      checkpoint_id_(checkpoint_id),
      id_{rank, part, std::random_device()()},
      path_(ValueFilePath(store_path_, checkpoint_id, id_)) {}

ValueFileWriter::~ValueFileWriter() {
  if (file_) Abandon();
}

Status ValueFileWriter::Create() {
  CKPTDB_RETURN_IF_ERROR(
      fs_->CreateDirIfMissing(ValueDirOf(store_path_, checkpoint_id_)));
  rocksdb::FileOptions options;
  // Plain pwrite(2) calls, as a program writing its own files would make; at
  // the offset the writer keeps, so that DropLast can take bytes back.
  options.use_mmap_writes = false;
  return FromRocks(fs_->NewWritableFile(path_, options, &file_, nullptr),
                   "creating value file " + path_);
}

Result<ValuePointer> ValueFileWriter::Append(std::string_view bytes) {
  if (!file_) CKPTDB_RETURN_IF_ERROR(Create());
  ValuePointer pointer = id_;
  pointer.offset = size_;
  pointer.nbytes = bytes.size();
  CKPTDB_RETURN_IF_ERROR(Write(bytes.data(), bytes.size(), bytes.size()));
  return pointer;
}

Result<ValuePointer> ValueFileWriter::AppendHashing(std::string_view bytes,
                                                    bool content,
                                                    ChunkDigest* digest) {
  if (!file_) CKPTDB_RETURN_IF_ERROR(Create());
  ValuePointer pointer = id_;
  pointer.offset = size_;
  pointer.nbytes = bytes.size();
  Status written;
  auto write = [&](const char* block, size_t size) {
    written = Write(block, size, bytes.size());
    return written.ok();
  };
  const std::optional<ChunkDigest> hashed =
      DigestInBlocks(bytes.data(), bytes.size(), content, write);
  CKPTDB_RETURN_IF_ERROR(written);
  *digest = *hashed;
  return pointer;
}

Status ValueFileWriter::Write(const char* block, size_t size,
                              size_t chunk_bytes) {
  if (chunk_bytes < kGatheredBelowBytes) {
    if (gathered_.size() + size > kGatherBytes)
      CKPTDB_RETURN_IF_ERROR(WriteGathered());
    if (gathered_.capacity() < kGatherBytes) gathered_.reserve(kGatherBytes);
    gathered_.insert(gathered_.end(), block, block + size);
    size_ += size;
    return Status::OK();
  }
  CKPTDB_RETURN_IF_ERROR(WriteGathered());
  CKPTDB_RETURN_IF_ERROR(WriteAt(block, size, size_, chunk_bytes));
  size_ += size;
  return StartWriteBack();
}

Status ValueFileWriter::WriteGathered() {
  if (gathered_.empty()) return Status::OK();
  CKPTDB_RETURN_IF_ERROR(WriteAt(gathered_.data(), gathered_.size(),
                                 size_ - gathered_.size(), gathered_.size()));
  gathered_.clear();
  return StartWriteBack();
}

Status ValueFileWriter::WriteAt(const char* block, size_t size, uint64_t at,
                                size_t what_bytes) {
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(file_->PositionedAppend(rocksdb::Slice(block, size), at,
                                        rocksdb::IOOptions(), nullptr),
                "writing " + std::to_string(what_bytes) +
                    " bytes to value file " + path_));
  unsynced_ += size;
  return Status::OK();
}

Status ValueFileWriter::DropLast(const ValuePointer& last) {
  CKPTDB_REQUIRE(file_ != nullptr && last.offset + last.nbytes == size_,
                 "dropping bytes that are not the last of value file " + path_);
  if (last.nbytes <= gathered_.size()) {  // not written yet
    gathered_.resize(gathered_.size() - last.nbytes);
    size_ = last.offset;
    return Status::OK();
  }
  CKPTDB_RETURN_IF_ERROR(WriteGathered());
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(file_->Truncate(last.offset, rocksdb::IOOptions(), nullptr),
                "truncating value file " + path_ + " to " +
                    std::to_string(last.offset) + " bytes"));
  size_ = last.offset;
  synced_to_ = std::min(synced_to_, size_);
  unsynced_ = size_ - synced_to_;
  return Status::OK();
}

Status ValueFileWriter::StartWriteBack() {
  if (unsynced_ < kWriteBackBytes) return Status::OK();
  const uint64_t written = size_ - gathered_.size();
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(file_->RangeSync(synced_to_, written - synced_to_,
                                 rocksdb::IOOptions(), nullptr),
                "starting write-back of value file " + path_));
  synced_to_ = written;
  unsynced_ = 0;
  return Status::OK();
}

Status ValueFileWriter::Finish() {
  if (!file_) return Status::OK();
  Status gathered = WriteGathered();
  if (!gathered.ok()) {
    Abandon();
    return gathered;
  }
  if (size_ == 0) {  // every chunk appended was dropped again
    const rocksdb::IOStatus closed =
        file_->Close(rocksdb::IOOptions(), nullptr);
    file_.reset();
    CKPTDB_RETURN_IF_ERROR(FromRocks(closed, "closing value file " + path_));
    return fs_->Remove(path_);
  }
  Status s = FromRocks(file_->Sync(rocksdb::IOOptions(), nullptr),
                       "syncing value file " + path_);
  if (s.ok()) {
    s = FromRocks(file_->Close(rocksdb::IOOptions(), nullptr),
                  "closing value file " + path_);
  }
  file_.reset();
  // The file's entry in its checkpoint's directory, that directory's in the
  // values directory, and that one's in the store directory. (Each writer
  // syncs all three: a directory found existing may have been made by a save
  // that died before syncing it. A sync of a directory with nothing new costs
  // little.)
  if (s.ok()) s = fs_->SyncDir(ValueDirOf(store_path_, checkpoint_id_));
  if (s.ok()) s = fs_->SyncDir(ValuesDir(store_path_));
  if (s.ok()) s = fs_->SyncDir(store_path_);
  if (!s.ok()) (void)fs_->Remove(path_);
  return s;
}

void ValueFileWriter::Abandon() {
  gathered_.clear();
  if (file_) {
    (void)file_->Close(rocksdb::IOOptions(), nullptr);
    file_.reset();
  }
  (void)fs_->Remove(path_);
}

Result<std::vector<int64_t>> ValueDirectories::Ids() {
  std::vector<std::string> names;
  const rocksdb::IOStatus listed =
      fs_.GetChildren(ValuesDir(path_), rocksdb::IOOptions(), &names, nullptr);
  if (listed.IsNotFound()) return std::vector<int64_t>();
  CKPTDB_RETURN_IF_ERROR(FromRocks(listed, "listing " + ValuesDir(path_)));
  std::vector<int64_t> ids;
  for (const std::string& name : names) {
    int64_t id = 0;
    if (ParseValueDirName(name, &id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status ValueDirectories::List(int64_t checkpoint_id,
                              std::vector<std::string>* names) {
  const std::string dir = ValueDirOf(path_, checkpoint_id);
  const rocksdb::IOStatus listed =
      fs_.GetChildren(dir, rocksdb::IOOptions(), names, nullptr);
  if (listed.IsNotFound()) {
    names->clear();
    return Status::OK();
  }
  return FromRocks(listed, "listing " + dir);
}

Status ValueDirectories::Remove(int64_t checkpoint_id) {
  const std::string dir = ValueDirOf(path_, checkpoint_id);
  std::vector<std::string> names;
  CKPTDB_RETURN_IF_ERROR(List(checkpoint_id, &names));
  if (names.empty() &&
      fs_.FileExists(dir, rocksdb::IOOptions(), nullptr).IsNotFound())
    return Status::OK();
  bool foreign = false;
  for (const std::string& name : names) {
    if (name == "." || name == "..") continue;
    if (!name.ends_with(".val")) {
      foreign = true;
      continue;
    }
    CKPTDB_RETURN_IF_ERROR(fs_.Remove(dir + "/" + name));
  }
  if (foreign) return Status::OK();
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      fs_.DeleteDir(dir, rocksdb::IOOptions(), nullptr), "removing " + dir));
  return fs_.SyncDir(ValuesDir(path_));
}

void FileRemover::Remove(const std::string& store_path, const Batch& batch) {
  auto report = [&](const std::string& what, const Status& s) {
    failed_ = true;
    rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, batch.log,
                 "removing %s of a deleted checkpoint failed (the next save "
                 "or open removes it): %s",
                 what.c_str(), s.ToString().c_str());
  };
  for (const std::string& file : batch.files) {
    Status s = batch.fs->Remove(file);
    if (!s.ok()) report(file, s);
  }
  ValueDirectories dirs(*batch.fs, store_path);
  for (int64_t id : batch.value_dirs) {
    Status s = dirs.Remove(id);
    if (!s.ok()) report(ValueDirOf(store_path, id), s);
  }
}

void FileRemover::Start(std::string store_path, Batch batch) {
  std::lock_guard lock(mu_);
  WaitLocked();
  try {
    // A copy of the batch (ids and paths): the fallback below keeps its own.
    running_ = std::async(std::launch::async, [this, store_path, batch] {
      LowerThisThreadsPriority();
      Remove(store_path, batch);
    });
  } catch (const std::system_error&) {
    // No thread to be had (a process limit): the removal runs here.
    Remove(store_path, batch);
  }
}

void FileRemover::Wait() {
  std::lock_guard lock(mu_);
  WaitLocked();
}

void FileRemover::WaitLocked() {
  if (running_.valid()) running_.get();
}

Status ValueDirectories::AddStray(int64_t checkpoint_id,
                                  const std::vector<ValueFileExtent>& named,
                                  std::vector<std::string>* stray) {
  std::vector<std::string> names;
  CKPTDB_RETURN_IF_ERROR(List(checkpoint_id, &names));
  std::set<std::string> reached;
  for (const ValueFileExtent& file : named) reached.insert(file.name);
  for (const std::string& name : names) {
    const std::string relative = std::to_string(checkpoint_id) + "/" + name;
    if (name.ends_with(".val") && !reached.contains(relative))
      stray->push_back(ValuesDir(path_) + "/" + relative);
  }
  return Status::OK();
}

Result<std::string> ValueDirectories::FirstLoss(
    const std::vector<ValueFileExtent>& files) {
  for (const ValueFileExtent& values : files) {
    const std::string path = ValuesDir(path_) + "/" + values.name;
    const bool missing =
        fs_.FileExists(path, rocksdb::IOOptions(), nullptr).IsNotFound();
    uint64_t size = 0;
    if (!missing) {
      CKPTDB_RETURN_IF_ERROR(
          FromRocks(fs_.GetFileSize(path, rocksdb::IOOptions(), &size, nullptr),
                    "value file " + path));
      if (size >= values.end) continue;
    }
    return "value file " + path +
           (!missing
                ? " holds " + std::to_string(size) +
                      " bytes, its chunks need " + std::to_string(values.end)
                : " is missing");
  }
  return std::string();
}

}  // namespace ckptdb::storage
