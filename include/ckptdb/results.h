#pragma once

// The result types of DB's calls (ckptdb/db.h): what a load, a read, a verify
// and a store check report, and a pending background save.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb {

// Byte counts of one Load on the calling rank.
struct LoadStats {
  uint64_t bytes_read = 0;         // chunk bytes this rank read from storage
  uint64_t bytes_needed = 0;       // bytes this rank's targets received
  uint64_t bytes_sent = 0;         // bytes this rank sent to other ranks
  uint64_t device_bytes_sent = 0;  // of those, sent device to device (NCCL)
  uint64_t chunks_read = 0;
};

struct LoadResult {
  std::vector<std::string>
      missing_keys{};  // requested, not in the checkpoint (strict=false)
  std::vector<std::string>
      unexpected_keys{};  // in the checkpoint, not requested
  LoadStats stats{};
};

// An owned tensor (or part of one) returned by DB::Read.
struct Tensor {
  DType dtype = DType::kFloat32;
  Shape shape{};
  // C-contiguous.
  std::vector<std::byte> data{};
};

// Byte counts of one DB::Read.
struct ReadStats {
  // Bytes of the stored chunks read (each chunk meeting the index is read
  // whole and its checksum verified).
  uint64_t bytes_read = 0;
  uint64_t chunks_read = 0;
};

// Per-verify parameters.
struct VerifyOptions {
  // Progress, when set: called after each chunk with the chunk bytes checked
  // so far and the checkpoint's total, one call at a time (from I/O threads).
  std::function<void(uint64_t done, uint64_t total)> on_progress;
};

// What DB::Verify found in one checkpoint.
struct VerifyReport {
  int64_t checkpoint_id = 0;
  // Chunks read and checked, and their bytes.
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  // Chunks unreadable or whose checksum differs.
  uint64_t damaged_chunks = 0;
  // One message per problem, naming the tensor and the chunk (offset): a
  // chunk outside its tensor, a recorded size that does not match its box,
  // chunks that overlap or leave a gap, a chunk unreadable or whose checksum
  // differs. Empty when the checkpoint is intact.
  std::vector<std::string> problems{};
  // Of the damaged chunks, those whose bytes are intact and read back through
  // the copy the store keeps of their location (their table file is damaged
  // around them: a pointer, index or footer). Nothing of them is lost.
  uint64_t chunks_read_through_copies = 0;
  // Tensors with a chunk whose bytes are damaged or missing: lost in this
  // checkpoint and in every checkpoint that shares that chunk. Sorted.
  std::vector<std::string> lost_tensors{};

  bool ok() const { return problems.empty(); }
};

// What DB::CheckStore found beyond single checkpoints.
struct StoreCheckReport {
  // Checkpoint ids with chunk data but no record that may have been
  // committed: damage (the data is kept, never deleted).
  std::vector<int64_t> unaccounted_chunk_ids{};
  // Checkpoint ids with chunk data but no record that were never committed,
  // or with value files that no chunk reaches: a save under way or cut short
  // (or a delete cut short), whose leftovers the next read-write open
  // removes. Not damage.
  std::vector<int64_t> unfinished_save_ids{};
  // Value files of a checkpoint that none of its chunks is in (left by a
  // writer of an earlier, failed attempt at that checkpoint id), by path:
  // unreachable space, not damage.
  std::vector<std::string> stray_value_files{};
  // Damaged or missing copies of the commit journal, by path, with why
  // (missing both: nothing guards the checkpoints against a database that
  // loses records). A read-write open writes them again.
  std::vector<std::string> damaged_journal_copies{};
  // Metadata (records, chunk locations, the database's own) damaged in one
  // of the two copies the store keeps, one line each naming the checkpoint
  // and the file: nothing is lost, reads use the intact copy, and the next
  // read-write open rewrites the damaged one.
  std::vector<std::string> repairable_metadata{};
  // Metadata damaged in both copies, one line each naming the checkpoint.
  std::vector<std::string> lost_metadata{};
  // Chunk table files damaged outside their blocks (their whole-file
  // checksum differs, their blocks check), one line each naming the file:
  // every chunk in or behind them reads whole, and no open rewrites them.
  // Damage inside a chunk table's blocks is reported by Verify of the
  // checkpoints whose chunks it holds.
  std::vector<std::string> damaged_chunk_tables{};
  // Entries that are not ckptdb's where it keeps its directories (a symbolic
  // link or a FIFO at staging, values or values/<id>): left alone by every
  // call, so they are for the user to remove. "PATH is a symbolic link".
  std::vector<std::string> foreign_entries{};
  // Whether a read-write handle (of this process or another) held the store
  // while it was checked: unfinished_save_ids and stray_value_files may then
  // be a save under way. Without one they are left over.
  bool writer_active = false;

  bool ok() const {
    return unaccounted_chunk_ids.empty() && damaged_journal_copies.empty() &&
           repairable_metadata.empty() && lost_metadata.empty() &&
           damaged_chunk_tables.empty() && foreign_entries.empty();
  }
};

// A save running in the background (DB::SaveAsync).
class PendingSave {
 public:
  virtual ~PendingSave() = default;
  // True once the save has finished, committed or failed. Local; never
  // blocks.
  virtual bool Done() const = 0;
  // Waits for the save and returns the committed checkpoint's info or the
  // save's error, the same on every rank. May be called again, from any
  // thread.
  virtual Result<CheckpointInfo> Wait() = 0;
};

}  // namespace ckptdb
