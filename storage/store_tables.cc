// The table files' own checks: each file's whole-file checksum (recorded in
// the MANIFEST) and, where it differs, its block checksums; the open's check of
// the metadata tables and verify's report of damage no read sees.
#include <rocksdb/env.h>
#include <rocksdb/file_checksum.h>
#include <rocksdb/sst_file_reader.h>

#include <algorithm>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "storage/column_families.h"
#include "storage/file_checksums.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {

namespace {

// Whether `path` still has the whole-file checksum the MANIFEST records for
// it (`file`); nullopt for a file written without one (by a build before
// them).
std::optional<rocksdb::Status> CheckWholeFile(
    rocksdb::Env* env, const rocksdb::LiveFileMetaData& file,
    const std::string& path) {
  if (file.file_checksum_func_name != rocksdb::kStandardDbFileChecksumFuncName)
    return std::nullopt;
  std::unique_ptr<rocksdb::SequentialFile> in;
  rocksdb::Status s = env->NewSequentialFile(path, &in, rocksdb::EnvOptions());
  if (!s.ok()) return s;
  uint32_t crc = 0;
  // A MiB at a time: a chunk table file may be large, and only its checksum
  // is wanted.
  std::vector<char> buffer(size_t{1} << 20);
  while (true) {
    rocksdb::Slice piece;
    s = in->Read(buffer.size(), &piece, buffer.data());
    if (!s.ok()) return s;
    if (piece.empty()) break;
    crc = Crc32c(crc, piece.data(), piece.size());
  }
  if (WholeFileChecksum(crc) != file.file_checksum)
    return rocksdb::Status::Corruption("whole-file checksum mismatch");
  return rocksdb::Status::OK();
}

// Whether every block of the table file at `path` checks.
rocksdb::Status CheckBlocks(const rocksdb::Options& options,
                            const std::string& path) {
  rocksdb::SstFileReader reader(options);
  rocksdb::Status s = reader.Open(path);
  if (s.ok()) s = reader.VerifyChecksum();
  return s;
}

}  // namespace

rocksdb::Options StoreImpl::TableFileOptions(const std::string& family) const {
  rocksdb::Options options;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) =
      family == kMetaCf ? MetaCfOptions() : ChunkCfOptions();
  options.env = env_.get();
  return options;
}

Status StoreImpl::BlocksIntact(const std::string& table,
                               const std::string& family) {
  return FromRocks(CheckBlocks(TableFileOptions(family), table),
                   "checking the blocks of " + table);
}

std::vector<StoreImpl::TableCheck> StoreImpl::CheckTables(
    const std::string& family) {
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  std::erase_if(files, [&](const rocksdb::LiveFileMetaData& file) {
    return file.column_family_name != family;
  });
  std::vector<TableCheck> out(files.size());
  const rocksdb::Options options = TableFileOptions(family);
  auto check_one = [&](size_t i) {
    TableCheck& check = out[i];
    check.path = files[i].db_path + files[i].name;
    // A file whose bytes are those it was written with has intact blocks:
    // they are read again only to tell where a mismatch lies, or for a file
    // without a whole-file checksum.
    const std::optional<rocksdb::Status> whole =
        CheckWholeFile(env_.get(), files[i], check.path);
    if (whole && whole->ok()) return;
    check.blocks = CheckBlocks(options, check.path);
    if (check.blocks.ok() && whole) check.whole_file = *whole;
  };
  // The files are read on a few threads at once: a store of many
  // checkpoints waits for the slowest share, not for the sum.
  const size_t threads = std::min<size_t>(
      files.size(), std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  auto check_share = [&](size_t t) {
    for (size_t i = t; i < files.size(); i += threads) check_one(i);
  };
  std::vector<std::future<void>> running;
  for (size_t t = 1; t < threads; ++t) {
    try {
      running.push_back(std::async(std::launch::async, check_share, t));
    } catch (const std::system_error&) {  // no thread to be had: done here
      running.push_back(std::async(std::launch::deferred, check_share, t));
    }
  }
  if (threads > 0) check_share(0);
  for (auto& r : running) r.get();
  return out;
}

std::set<std::string> StoreImpl::DamagedChunkTables() {
  std::set<std::string> out;
  for (const TableCheck& check : CheckTables(kChunksCf)) {
    if (check.blocks.IsCorruption() || check.whole_file.IsCorruption())
      out.insert(check.path);
  }
  return out;
}

Status StoreImpl::VerifyMetaTables() {
  for (const TableCheck& check : CheckTables(kMetaCf)) {
    const rocksdb::Status s =
        check.blocks.ok() ? check.whole_file : check.blocks;
    if (s.IsCorruption()) {
      return Status::Corruption("store '" + path_ + "': metadata table file " +
                                check.path + " is damaged: " + s.ToString());
    }
    CKPTDB_RETURN_IF_ERROR(FromRocks(s, "verifying " + check.path));
  }
  return Status::OK();
}

void StoreImpl::ReportTablesOutsideBlocks(StoreReport* report) {
  // Damage inside the blocks is the reads' to report: the records' reads, and
  // the checkpoints' chunk reads.
  const struct {
    const char* family;
    std::vector<std::string>* lines;
    const char* what;
    const char* outcome;
  } kinds[] = {
      {kMetaCf, &report->repairable_metadata, "metadata table file ",
       "every record reads whole): a read-write open rebuilds the database "
       "from the copies of its records"},
      {kChunksCf, &report->damaged_chunk_tables, "chunk table file ",
       "every chunk it holds or points to reads whole and checks its own "
       "checksum): nothing is lost; a read-write open writes it again from the "
       "copy of its chunk locations"},
  };
  for (const auto& kind : kinds) {
    for (const TableCheck& check : CheckTables(kind.family)) {
      if (!check.blocks.ok() || !check.whole_file.IsCorruption()) continue;
      kind.lines->push_back(std::string(kind.what) + check.path +
                            " is damaged outside its blocks (whole-file "
                            "checksum mismatch; " +
                            kind.outcome);
    }
  }
}

}  // namespace ckptdb::storage
