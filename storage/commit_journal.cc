#include "storage/commit_journal.h"

#include "core/checksum.h"
#include "core/little_endian.h"

namespace ckptdb::storage {
namespace {

constexpr char kMagic[8] = {'C', 'K', 'P', 'T', 'J', 'R', 'N', 'L'};
constexpr uint32_t kVersion = 1;
// magic, version, sequence, high water, two counts.
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 8 + 4 + 4;
constexpr char kJournalFile[] = "CKPTDB_JOURNAL";

}  // namespace

std::string EncodeJournal(const CommitJournal& journal) {
  std::string out(kMagic, sizeof(kMagic));
  PutLittleEndian<uint32_t>(&out, kVersion);
  PutLittleEndian<uint64_t>(&out, journal.sequence);
  PutLittleEndian<int64_t>(&out, journal.high_water);
  PutLittleEndian<uint32_t>(&out,
                            static_cast<uint32_t>(journal.committed.size()));
  PutLittleEndian<uint32_t>(&out,
                            static_cast<uint32_t>(journal.deleting.size()));
  for (int64_t id : journal.committed) PutLittleEndian<int64_t>(&out, id);
  for (int64_t id : journal.deleting) PutLittleEndian<int64_t>(&out, id);
  PutLittleEndian<uint64_t>(&out, ChunkChecksum(out.data(), out.size()));
  return out;
}

Result<CommitJournal> DecodeJournal(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes + 8 ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::Corruption("not a commit journal (" +
                              std::to_string(bytes.size()) + " bytes)");
  }
  const size_t body = bytes.size() - 8;
  if (GetLittleEndian<uint64_t>(bytes.data() + body) !=
      ChunkChecksum(bytes.data(), body)) {
    return Status::Corruption("commit journal checksum mismatch");
  }
  const char* p = bytes.data() + sizeof(kMagic);
  if (const uint32_t version = GetLittleEndian<uint32_t>(p);
      version != kVersion) {
    return Status::Corruption("commit journal version " +
                              std::to_string(version) + " is not supported");
  }
  CommitJournal journal;
  journal.sequence = GetLittleEndian<uint64_t>(p + 4);
  journal.high_water = GetLittleEndian<int64_t>(p + 12);
  const uint64_t committed = GetLittleEndian<uint32_t>(p + 20);
  const uint64_t deleting = GetLittleEndian<uint32_t>(p + 24);
  if (body != kHeaderBytes + 8 * (committed + deleting)) {
    return Status::Corruption(
        "commit journal length does not match its "
        "counts");
  }
  const char* ids = bytes.data() + kHeaderBytes;
  for (uint64_t i = 0; i < committed + deleting; ++i) {
    const int64_t id = GetLittleEndian<int64_t>(ids + 8 * i);
    if (id <= 0 || id > journal.high_water) {
      return Status::Corruption("commit journal lists checkpoint id " +
                                std::to_string(id) +
                                " above its high-water "
                                "mark " +
                                std::to_string(journal.high_water));
    }
    (i < committed ? journal.committed : journal.deleting).insert(id);
  }
  return journal;
}

std::vector<std::string> JournalPaths(const std::string& store_path) {
  return {store_path + "/" + kJournalFile + ".0",
          store_path + "/" + kJournalFile + ".1"};
}

Result<JournalState> ReadJournal(StoreFileSystem& fs,
                                 const std::string& store_path) {
  JournalState state;
  bool any = false;
  std::vector<std::string> missing;
  for (const std::string& path : JournalPaths(store_path)) {
    auto bytes = fs.ReadWholeFile(path);
    if (bytes.status().IsNotFound()) {
      missing.push_back(path + ": missing");
      continue;
    }
    any = true;
    // Something other than a regular file in its place is a damaged copy.
    if (bytes.status().IsCorruption()) {
      state.damaged.push_back(path + ": " + bytes.status().message());
      continue;
    }
    // An I/O error says nothing about the copy's contents: the open fails.
    if (!bytes.ok()) return bytes.status();
    auto journal = DecodeJournal(*bytes);
    if (!journal.ok()) {
      state.damaged.push_back(path + ": " + journal.status().message());
      continue;
    }
    if (!state.journal || journal->sequence > state.journal->sequence)
      state.journal = std::move(journal).value();
  }
  // One copy without the other: the missing one is damage too (a
  // read-write open writes it again).
  if (any)
    state.damaged.insert(state.damaged.end(), missing.begin(), missing.end());
  if (any && !state.journal) {
    std::string why;
    for (const auto& d : state.damaged) why += (why.empty() ? "" : "; ") + d;
    return Status::Corruption(
        "no copy of the commit journal of '" + store_path +
        "' is whole, so the store cannot tell which checkpoints it "
        "committed: " +
        why);
  }
  return state;
}

Status WriteJournal(StoreFileSystem& fs, const std::string& store_path,
                    const CommitJournal& journal) {
  const std::string bytes = EncodeJournal(journal);
  for (const std::string& path : JournalPaths(store_path)) {
    // Renamed into place, so that a reader never sees a copy half written.
    const std::string tmp = path + ".tmp";
    const Status written = fs.WriteFileSynced(tmp, bytes)
                               .WithContext("writing the commit journal");
    if (!written.ok()) {
      (void)fs.Remove(tmp);  // not left behind (a full disk's, say)
      return written;
    }
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(fs.RenameFile(tmp, path, rocksdb::IOOptions(), nullptr),
                  "writing the commit journal: renaming " + tmp));
  }
  return fs.SyncDir(store_path);
}

}  // namespace ckptdb::storage
