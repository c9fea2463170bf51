// ckpt-db-dump verify: reads every chunk of the selected checkpoints, checks
// the store as a whole, and says what a read-write open repairs and what is
// lost.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dump_common.h"

namespace ckptdb::tools {
namespace {

// The store as a whole: chunk data no record accounts for, damaged journal
// copies. Returns the number of problems, each printed. Leftovers of a save
// or delete count unless a writer holds the store (its save under way).
size_t VerifyStore(DB& db) {
  auto report = db.CheckStore();
  if (!report.ok()) {
    std::printf("store: DAMAGED: %s\n", report.status().message().c_str());
    return 1;
  }
  const char* whose =
      report->writer_active
          ? "a writer holds the store: its save under way, or left by a save "
            "or delete cut short"
          : "LEFT OVER by a save or delete cut short; not damage";
  for (int64_t id : report->unfinished_save_ids) {
    std::printf(
        "store: chunk data of checkpoint id %lld, which has no record (%s; a "
        "read-write open removes it)\n",
        static_cast<long long>(id), whose);
  }
  for (const std::string& file : report->stray_value_files) {
    std::printf(
        "store: value file %s holds no chunk of its checkpoint (%s; no open "
        "removes it, so remove it yourself)\n",
        file.c_str(), whose);
  }
  for (int64_t id : report->unaccounted_chunk_ids) {
    std::printf(
        "store: DAMAGED: chunk data of checkpoint id %lld has no "
        "record; kept, since it may have been committed\n",
        static_cast<long long>(id));
  }
  for (const std::string& copy : report->damaged_journal_copies) {
    std::printf(
        "store: DAMAGED commit journal copy: %s (a read-write open writes it "
        "again)\n",
        copy.c_str());
  }
  for (const std::string& line : report->repairable_metadata)
    std::printf("store: DAMAGED metadata, nothing lost: %s\n", line.c_str());
  for (const std::string& line : report->lost_metadata)
    std::printf("store: DAMAGED metadata, LOST: %s\n", line.c_str());
  for (const std::string& line : report->damaged_chunk_tables)
    std::printf("store: DAMAGED, nothing lost: %s\n", line.c_str());
  for (const std::string& entry : report->foreign_entries) {
    std::printf(
        "store: NOT CKPTDB'S: %s; no open removes it, so remove it "
        "yourself\n",
        entry.c_str());
  }
  if (report->ok() && report->unfinished_save_ids.empty() &&
      report->stray_value_files.empty())
    std::printf("store: consistent (all chunk data belongs to checkpoints)\n");
  else if (report->ok())
    std::printf("store: consistent apart from the leftovers above\n");
  const size_t leftovers = report->writer_active
                               ? 0
                               : report->unfinished_save_ids.size() +
                                     report->stray_value_files.size();
  return leftovers + report->unaccounted_chunk_ids.size() +
         report->damaged_journal_copies.size() +
         report->repairable_metadata.size() + report->lost_metadata.size() +
         report->damaged_chunk_tables.size() + report->foreign_entries.size();
}

// Tensors lost (a chunk's bytes damaged), by key: the checkpoints they are
// lost in (those that share the damaged chunk).
using LostTensors = std::map<std::string, std::vector<int64_t>>;

// Verifies the checkpoint `which` selects and prints the outcome; returns its
// problems, or NotFound when there is no such checkpoint. Adds its lost
// tensors to `lost`.
Result<size_t> VerifyCheckpoint(DB& db, const CheckpointSelector& which,
                                LostTensors* lost) {
  Result<VerifyReport> verified = Status::Internal("not verified");
  {
    Progress progress("verify", 0);
    VerifyOptions options;
    options.on_progress = [&](uint64_t done, uint64_t total) {
      progress.Set(done, total);
    };
    verified = db.Verify(which, options);
  }
  if (verified.status().IsNotFound()) return verified.status();
  if (!verified.ok()) {
    std::printf("checkpoint %s: DAMAGED metadata: %s\n",
                which.ToString().c_str(), verified.status().message().c_str());
    return 1;
  }
  const VerifyReport& report = *verified;
  const auto id = static_cast<long long>(report.checkpoint_id);
  if (report.ok()) {
    std::printf("checkpoint %lld: ok (%llu chunks, %s, checksums verified)\n",
                id, static_cast<unsigned long long>(report.chunks),
                HumanBytes(report.bytes).c_str());
    return 0;
  }
  std::printf("checkpoint %lld: DAMAGED (%zu problems in %llu chunks)\n", id,
              report.problems.size(),
              static_cast<unsigned long long>(report.chunks));
  for (const std::string& p : report.problems) std::printf("  %s\n", p.c_str());
  if (report.chunks_read_through_copies > 0) {
    std::printf(
        "  %llu chunk(s) read back whole through the copies of their "
        "locations: nothing of them is lost\n",
        static_cast<unsigned long long>(report.chunks_read_through_copies));
  }
  for (const std::string& key : report.lost_tensors) {
    std::printf("  LOST: tensor '%s' (its other tensors read back)\n",
                key.c_str());
    (*lost)[key].push_back(report.checkpoint_id);
  }
  return report.problems.size();
}

// What verify found lost, by tensor and whole checkpoints (`unreadable`:
// their records are damaged in both copies), and what a read-write open
// repairs.
void PrintSummary(const LostTensors& lost,
                  const std::vector<int64_t>& unreadable, size_t problems) {
  if (problems == 0) return;
  if (!unreadable.empty()) {
    std::printf("summary: LOST checkpoint(s)");
    for (int64_t id : unreadable)
      std::printf(" %lld", static_cast<long long>(id));
    std::printf(
        " (their records are damaged in both copies; the other checkpoints "
        "read back)\n");
  }
  if (lost.empty() && unreadable.empty()) {
    std::printf(
        "summary: no checkpoint lost data; each problem above says whether a "
        "read-write open repairs it\n");
    return;
  }
  for (const auto& [key, ids] : lost) {
    std::printf("summary: LOST tensor '%s' in checkpoint(s)", key.c_str());
    for (int64_t id : ids) std::printf(" %lld", static_cast<long long>(id));
    std::printf(
        " (they share the damaged chunk; no open repairs it: save the "
        "tensor again)\n");
  }
}

}  // namespace

int Verify(const std::string& path, const Selection& sel) {
  auto db = OpenStore(path);
  if (db.status().IsCorruption()) {
    std::printf("store: DAMAGED: %s\n", db.status().message().c_str());
    return kDamaged;
  }
  if (!db.ok()) return Fail(db.status());
  LostTensors lost;
  if (sel.given()) {
    auto damaged = VerifyCheckpoint(**db, sel.selector(), &lost);
    if (!damaged.ok()) return Fail(damaged.status());
    return *damaged == 0 ? 0 : kDamaged;
  }
  auto all = (*db)->ListCheckpoints();
  if (!all.ok()) return Fail(all.status());
  size_t damaged_total = 0;
  std::vector<int64_t> unreadable;
  for (const CheckpointInfo& info : *all) {
    if (!info.damage.empty()) {
      std::printf("checkpoint %lld: DAMAGED metadata: %s\n",
                  static_cast<long long>(info.id), info.damage.c_str());
      ++damaged_total;
      unreadable.push_back(info.id);
      continue;
    }
    auto damaged =
        VerifyCheckpoint(**db, CheckpointSelector::Id(info.id), &lost);
    // Listed, then deleted by the store's writer: not damage.
    if (damaged.status().IsNotFound()) {
      std::printf("checkpoint %lld: deleted while verifying\n",
                  static_cast<long long>(info.id));
    }
    damaged_total += damaged.ok() ? *damaged : 0;
  }
  if (all->empty()) std::printf("(no checkpoints)\n");
  damaged_total += VerifyStore(**db);
  PrintSummary(lost, unreadable, damaged_total);
  return damaged_total == 0 ? 0 : kDamaged;
}

}  // namespace ckptdb::tools
