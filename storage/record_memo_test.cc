// What a store handle remembers of its records: kept until a change it did
// not see, forgotten by a delete of its checkpoint or by ForgetAll.
#include "storage/record_memo.h"

#include <gtest/gtest.h>

namespace ckptdb::storage {
namespace {

std::shared_ptr<const MainRecord> Record(int64_t id) {
  auto main = std::make_shared<MainRecord>();
  main->meta.info.id = id;
  return main;
}

TEST(RecordMemoTest, WhatAWalkFoundBesideAChangeIsNotKept) {
  RecordMemo memo;
  uint64_t changes = 0;
  EXPECT_FALSE(memo.RecordIds(&changes).has_value());
  memo.Added(7);  // a commit while the walk ran
  memo.RememberRecordIds({1, 2}, changes);
  EXPECT_FALSE(memo.RecordIds(&changes).has_value());
  memo.RememberRecordIds({1, 2, 7}, changes);
  memo.Added(8);
  memo.Removed(1);
  EXPECT_EQ(memo.RecordIds(&changes), (std::set<int64_t>{2, 7, 8}));
}

TEST(RecordMemoTest, ADecodedRecordIsKeptUntilItsCheckpointGoes) {
  RecordMemo memo;
  uint64_t changes = 0;
  EXPECT_EQ(memo.Decoded(3, &changes), nullptr);
  memo.RememberDecoded(Record(3), 100, changes);
  EXPECT_EQ(memo.Decoded(3, &changes)->meta.info.id, 3);
  EXPECT_EQ(memo.Decoded(4, &changes), nullptr);
  memo.Removed(4);  // another checkpoint's delete
  EXPECT_NE(memo.Decoded(3, &changes), nullptr);
  memo.Removed(3);
  EXPECT_EQ(memo.Decoded(3, &changes), nullptr);
  // Decoded beside a change, or too large: not kept.
  memo.Added(5);
  memo.RememberDecoded(Record(5), 100, changes);
  EXPECT_EQ(memo.Decoded(5, &changes), nullptr);
  memo.RememberDecoded(Record(5), RecordMemo::kKeptDecodedRecordBytes + 1,
                       changes);
  EXPECT_EQ(memo.Decoded(5, &changes), nullptr);
  memo.RememberDecoded(Record(5), RecordMemo::kKeptDecodedRecordBytes, changes);
  EXPECT_NE(memo.Decoded(5, &changes), nullptr);
  memo.ForgetInfo(5);
  EXPECT_EQ(memo.Decoded(5, &changes), nullptr);
}

TEST(RecordMemoTest, ForgetAllForgetsInfosIdsAndTheDecodedRecord) {
  RecordMemo memo;
  uint64_t changes = 0;
  CheckpointInfo info;
  info.id = 2;
  info.step = 9;
  memo.RememberInfo(info);
  memo.RecordIds(&changes);
  memo.RememberRecordIds({2}, changes);
  memo.Decoded(2, &changes);
  memo.RememberDecoded(Record(2), 1, changes);
  EXPECT_EQ(memo.Info(2), info);
  memo.ForgetAll();
  EXPECT_FALSE(memo.Info(2).has_value());
  EXPECT_FALSE(memo.RecordIds(&changes).has_value());
  EXPECT_EQ(memo.Decoded(2, &changes), nullptr);
}

}  // namespace
}  // namespace ckptdb::storage
