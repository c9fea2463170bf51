#include "storage/recovery.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ckptdb::storage {
namespace {

CommitJournal Journal(int64_t high_water, std::set<int64_t> committed,
                      std::set<int64_t> deleting = {}) {
  CommitJournal j;
  j.sequence = 3;
  j.high_water = high_water;
  j.committed = std::move(committed);
  j.deleting = std::move(deleting);
  return j;
}

TEST(RecoveryTest, ACleanStoreNeedsNothing) {
  const CommitJournal journal = Journal(3, {1, 2, 3});
  const Recovery r = PlanRecovery(journal, {1, 2, 3}, {1, 2, 3}, {});
  EXPECT_TRUE(r.records_to_delete.empty());
  EXPECT_TRUE(r.chunks_to_drop.empty());
  EXPECT_EQ(r.journal, journal);
  EXPECT_FALSE(r.journal_changed);
}

TEST(RecoveryTest, AnInterruptedDeleteIsFinishedExceptForSharedChunks) {
  // 2 was being deleted with 1, whose chunks it kept; 3 still shares 1's.
  const Recovery r =
      PlanRecovery(Journal(3, {3}, {1, 2}), {2, 3}, {1, 2, 3}, {1});
  EXPECT_EQ(r.records_to_delete, std::vector<int64_t>{2});
  EXPECT_EQ(r.chunks_to_drop, std::vector<int64_t>{2});
  EXPECT_EQ(r.journal, Journal(3, {3}));
  EXPECT_TRUE(r.journal_changed);
}

TEST(RecoveryTest, ARecordTheJournalMissedIsCommittedAndRaisesTheMark) {
  // The save of 4 died after its record, before the journal named it.
  const Recovery r = PlanRecovery(Journal(3, {3}), {3, 4}, {3, 4}, {});
  EXPECT_TRUE(r.chunks_to_drop.empty());
  EXPECT_EQ(r.journal, Journal(4, {3, 4}));
  EXPECT_TRUE(r.journal_changed);
}

TEST(RecoveryTest, ChunksWithoutARecordGoOnlyAboveTheMark) {
  // 5 and 6 never committed (above the mark); 2, at or below it, may have
  // (its record lost to damage): kept for `verify` to report.
  const Recovery r = PlanRecovery(Journal(4, {4}), {4}, {2, 4, 5, 6}, {});
  EXPECT_EQ(r.chunks_to_drop, (std::vector<int64_t>{5, 6}));
  EXPECT_FALSE(r.journal_changed);
}

TEST(RecoveryTest, WithoutAJournalNothingIsDroppedAndOneIsWritten) {
  const Recovery r = PlanRecovery(std::nullopt, {1, 3}, {1, 3, 7}, {});
  EXPECT_TRUE(r.records_to_delete.empty());
  EXPECT_TRUE(r.chunks_to_drop.empty());
  EXPECT_EQ(r.journal.committed, (std::set<int64_t>{1, 3}));
  EXPECT_EQ(r.journal.high_water, 7);
  EXPECT_TRUE(r.journal_changed);
}

std::set<int64_t> RandomIds(std::mt19937& rng, double p) {
  std::set<int64_t> ids;
  std::bernoulli_distribution pick(p);
  for (int64_t id = 1; id <= 8; ++id)
    if (pick(rng)) ids.insert(id);
  return ids;
}

// Over random stores: nothing committed or shared is ever dropped, every
// drop is provably a leftover, and the journal names exactly the records
// that remain.
TEST(RecoveryTest, RandomStoresKeepEverythingThatMayBeCommitted) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 5000; ++trial) {
    const std::set<int64_t> records = RandomIds(rng, 0.5);
    const std::set<int64_t> live = RandomIds(rng, 0.5);
    const std::set<int64_t> referenced = RandomIds(rng, 0.2);
    std::optional<CommitJournal> journal;
    if (trial % 5 != 0) {
      journal = Journal(std::uniform_int_distribution<int64_t>(0, 8)(rng),
                        RandomIds(rng, 0.4), RandomIds(rng, 0.2));
    }
    const Recovery r = PlanRecovery(journal, records, live, referenced);
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const std::set<int64_t> deleting =
        journal ? journal->deleting : std::set<int64_t>();
    std::set<int64_t> remaining;
    for (int64_t id : records)
      if (!deleting.contains(id)) remaining.insert(id);
    EXPECT_EQ(r.records_to_delete.size(), records.size() - remaining.size());
    for (int64_t id : r.records_to_delete) EXPECT_TRUE(deleting.contains(id));
    const int64_t old_mark = journal ? journal->high_water : 0;
    for (int64_t id : remaining) EXPECT_TRUE(r.journal.committed.contains(id));
    for (int64_t id : r.chunks_to_drop) {
      EXPECT_TRUE(live.contains(id)) << id;
      EXPECT_FALSE(r.journal.committed.contains(id)) << id;
      EXPECT_FALSE(referenced.contains(id)) << id;
      EXPECT_TRUE(id > r.journal.high_water || deleting.contains(id)) << id;
      if (!journal) ADD_FAILURE() << "dropped " << id << " without a journal";
    }
    EXPECT_GE(r.journal.high_water, old_mark);
    if (!remaining.empty()) {
      EXPECT_GE(r.journal.high_water, *remaining.rbegin());
    }
    EXPECT_TRUE(r.journal.deleting.empty());
    EXPECT_EQ(r.journal_changed, !journal || r.journal != *journal);
    EXPECT_TRUE(
        std::is_sorted(r.chunks_to_drop.begin(), r.chunks_to_drop.end()));
  }
}

}  // namespace
}  // namespace ckptdb::storage
