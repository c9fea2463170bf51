#include "storage/catalogue.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::FaultInjector;
using ckptdb::testing::TempDir;

CheckpointInfo Info(int64_t id, std::optional<int64_t> step,
                    std::optional<std::string> tag = std::nullopt) {
  CheckpointInfo info;
  info.id = id;
  info.step = step;
  info.tag = std::move(tag);
  return info;
}

const std::vector<CheckpointInfo> kListing = {Info(1, 10), Info(2, 20, "best"),
                                              Info(3, 20), Info(5, 30, "last")};

TEST(CheckpointCatalogueTest, SelectorsResolveToTheLatestMatch) {
  CheckpointCatalogue catalogue("/s");
  EXPECT_EQ(*catalogue.Resolve(kListing, CheckpointSelector::Latest()), 5);
  EXPECT_EQ(*catalogue.Resolve(kListing, CheckpointSelector::Id(2)), 2);
  // Two checkpoints of step 20: the later one.
  EXPECT_EQ(*catalogue.Resolve(kListing, CheckpointSelector::Step(20)), 3);
  EXPECT_EQ(*catalogue.Resolve(kListing, CheckpointSelector::Tag("best")), 2);
}

TEST(CheckpointCatalogueTest,
     AnUnmatchedSelectorIsNotFoundNamingItAndTheStore) {
  CheckpointCatalogue catalogue("/s");
  for (const CheckpointSelector& which :
       {CheckpointSelector::Id(4), CheckpointSelector::Step(40),
        CheckpointSelector::Tag("none")}) {
    const Status s = catalogue.Resolve(kListing, which).status();
    EXPECT_TRUE(s.IsNotFound()) << s.ToString();
    EXPECT_EQ(s.message(),
              "no checkpoint with " + which.ToString() + " in store '/s'");
  }
  const Status empty =
      catalogue.Resolve({}, CheckpointSelector::Latest()).status();
  EXPECT_TRUE(empty.IsNotFound());
  EXPECT_EQ(empty.message(), "store '/s' has no checkpoint yet");
}

// A selector whose kind is none of the enum's (a cast from a bad number) is
// InvalidArgument naming the kind, on every listing.
TEST(CheckpointCatalogueTest, ASelectorOfAnUnknownKindIsInvalidArgument) {
  CheckpointCatalogue catalogue("/s");
  CheckpointSelector odd;
  odd.kind = static_cast<CheckpointSelector::Kind>(9);
  for (const auto& listing : {kListing, std::vector<CheckpointInfo>{}}) {
    const Status s = catalogue.Resolve(listing, odd).status();
    EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
    EXPECT_EQ(s.message().rfind("a checkpoint selector of unknown kind 9", 0),
              0u)
        << s.ToString();
  }
  EXPECT_EQ(odd.ToString(), "a selector of unknown kind 9");
}

TEST(CheckpointCatalogueTest, ATagNamesOneCheckpoint) {
  CheckpointCatalogue catalogue("/s");
  EXPECT_TRUE(catalogue.CheckTagFree(kListing, "other").ok());
  const Status taken = catalogue.CheckTagFree(kListing, "last");
  EXPECT_TRUE(taken.IsInvalidArgument());
  EXPECT_EQ(taken.message(),
            "tag 'last' already names checkpoint id 5 in store '/s'");
}

TEST(CheckpointCatalogueTest, TheNextIdIsAboveEveryIdEverUsed) {
  CheckpointCatalogue catalogue("/s");
  // No journal (a store written before journals), nothing stored.
  EXPECT_EQ(catalogue.NextId({}, {}), 1);
  EXPECT_EQ(catalogue.NextId({7}, {3}), 8);  // chunks of an unfinished save
  EXPECT_EQ(catalogue.NextId({2}, {9}), 10);
  CommitJournal journal;
  journal.high_water = 12;  // ids up to 12 were used, then deleted
  journal.committed = {4};
  catalogue.Adopt({journal, {}});
  EXPECT_EQ(catalogue.NextId({}, {4}), 13);
  EXPECT_EQ(catalogue.NextId({20}, {4}), 21);
}

TEST(CheckpointCatalogueTest, ACheckpointBeingDeletedIsNotVisible) {
  CheckpointCatalogue catalogue("/s");
  // Without a journal every record counts.
  EXPECT_TRUE(catalogue.Visible(3));
  EXPECT_FALSE(catalogue.Committed(3));
  CommitJournal journal;
  journal.high_water = 3;
  journal.committed = {1, 2};
  journal.deleting = {3};
  catalogue.Adopt({journal, {"copy 1: damaged"}});
  EXPECT_TRUE(catalogue.Visible(1));
  EXPECT_FALSE(catalogue.Visible(3));
  EXPECT_TRUE(catalogue.Committed(2));
  EXPECT_FALSE(catalogue.Committed(3));
  EXPECT_EQ(catalogue.damaged_copies(),
            std::vector<std::string>{"copy 1: damaged"});
  catalogue.ForgetCommitted({2});
  EXPECT_FALSE(catalogue.Committed(2));
  EXPECT_TRUE(catalogue.Committed(1));
}

// The journal's numbers are little-endian whatever the machine's byte order,
// as every number of the store's own files is: a store copied to another
// machine reads the same.
TEST(CommitJournalTest, NumbersAreLittleEndianWhateverTheMachine) {
  CommitJournal journal;
  journal.sequence = 0x0102030405060708;
  journal.high_water = 0x1122334455667788;
  journal.committed = {0x0a0b};
  const std::string bytes = EncodeJournal(journal);
  // magic (8), version (4), sequence (8), high water (8), two counts (4 + 4),
  // the ids, the checksum (8).
  ASSERT_EQ(bytes.size(), 8u + 4 + 8 + 8 + 4 + 4 + 8 + 8);
  EXPECT_EQ(bytes.substr(12, 8),
            std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(bytes.substr(20, 8),
            std::string("\x88\x77\x66\x55\x44\x33\x22\x11", 8));
  EXPECT_EQ(bytes.substr(28, 4), std::string("\x01\0\0\0", 4));
  EXPECT_EQ(bytes.substr(36, 8), std::string("\x0b\x0a\0\0\0\0\0\0", 8));
  auto decoded = DecodeJournal(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, journal);
}

TEST(CheckpointCatalogueTest, SavingWritesTheJournalWithTheNextSequence) {
  TempDir dir;
  CheckpointCatalogue catalogue(dir.path());
  StoreFileSystem fs(nullptr);
  CommitJournal journal;
  journal.high_water = 2;
  journal.committed = {1, 2};
  ASSERT_TRUE(catalogue.Save(fs, journal).ok());
  EXPECT_EQ(catalogue.journal()->sequence, 1u);
  journal.committed.erase(1);
  ASSERT_TRUE(catalogue.Save(fs, journal).ok());
  EXPECT_EQ(catalogue.journal()->sequence, 2u);
  auto read = ReadJournal(fs, dir.path());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_TRUE(read->journal.has_value());
  EXPECT_EQ(*read->journal, *catalogue.journal());
  EXPECT_EQ(read->journal->committed, std::set<int64_t>{2});
}

// A journal that cannot be written stays as it was: the catalogue keeps the
// journal on disk.
TEST(CheckpointCatalogueTest, AFailedSaveKeepsTheCurrentJournal) {
  TempDir dir;
  CheckpointCatalogue catalogue(dir.path());
  auto faults = std::make_shared<FaultInjector>();
  StoreFileSystem fs(faults);
  CommitJournal journal;
  journal.high_water = 1;
  journal.committed = {1};
  ASSERT_TRUE(catalogue.Save(fs, journal).ok());
  faults->Arm(
      {.nth = 1, .from_nth_on = true, .ops = FileOpMask(FileOp::kWrite)});
  CommitJournal next = journal;
  next.committed.insert(2);
  next.high_water = 2;
  const Status s = catalogue.Save(fs, next);
  EXPECT_TRUE(s.IsIOError()) << s.ToString();
  EXPECT_EQ(catalogue.journal()->committed, std::set<int64_t>{1});
  EXPECT_EQ(catalogue.journal()->sequence, 1u);
}

}  // namespace
}  // namespace ckptdb::storage
