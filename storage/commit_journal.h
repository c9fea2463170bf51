#pragma once

// The commit journal: ckptdb's own record of which checkpoints are committed,
// kept in two copies beside RocksDB's files. RocksDB can lose a record without
// an error (a cut MANIFEST drops its last edits; a damaged log is read up to
// the damage); the journal turns such a loss into Corruption at open, and
// gives recovery the proof it needs before it deletes anything: chunks of an
// id above the high-water mark never committed.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"
#include "storage/file_system.h"

namespace ckptdb::storage {

struct CommitJournal {
  // Grows with every write; of two valid copies the higher one is current.
  uint64_t sequence = 0;
  // No checkpoint id above it was ever committed. Never decreases.
  int64_t high_water = 0;
  // Checkpoints committed and not deleted: each must have a record.
  std::set<int64_t> committed;
  // Checkpoints whose deletion began: their record and chunks may remain,
  // and recovery finishes removing them.
  std::set<int64_t> deleting;

  bool operator==(const CommitJournal&) const = default;
};

// Pure codec: a fixed header, the ids, and an XXH64 of it all. Decoding
// checks every length and the checksum (Corruption otherwise).
std::string EncodeJournal(const CommitJournal& journal);
Result<CommitJournal> DecodeJournal(std::string_view bytes);

// The two copies' paths in a store directory.
std::vector<std::string> JournalPaths(const std::string& store_path);

struct JournalState {
  // The current journal; empty when neither copy exists (a store written
  // before journals, or one being created).
  std::optional<CommitJournal> journal;
  // Copies that exist but cannot be read or decoded, or that are missing
  // while the other exists, with why.
  std::vector<std::string> damaged;
};

// Reads both copies. Corruption naming both when copies exist but none is
// valid.
Result<JournalState> ReadJournal(StoreFileSystem& fs,
                                 const std::string& store_path);

// Writes `journal` to both copies, one after the other, each synced and
// renamed into place, then syncs the directory: a crash or failure leaves at
// least one valid copy, old or new, and readers never see a partial one.
Status WriteJournal(StoreFileSystem& fs, const std::string& store_path,
                    const CommitJournal& journal);

}  // namespace ckptdb::storage
