#include "ckptdb/db.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>

#include "ckptdb/file_system_hooks.h"
#include "engine/api/db_testing.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::Buf;
using testing::FaultInjector;
using testing::OpenOrDie;
using testing::SnapshotDir;
using testing::TempDir;
using testing::WithHooks;

TEST(DBTest, RoundTripsEveryDtypeIncludingZeroDimAndEmpty) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  std::vector<Buf> bufs;
  const DType all[] = {
      DType::kFloat64,  DType::kFloat32,      DType::kFloat16,
      DType::kBFloat16, DType::kInt64,        DType::kInt32,
      DType::kInt16,    DType::kInt8,         DType::kUInt8,
      DType::kBool,     DType::kFloat8E4M3FN, DType::kFloat8E5M2};
  for (DType t : all)
    bufs.emplace_back(t, Shape{3, 5}, static_cast<uint32_t>(t));
  bufs.emplace_back(DType::kFloat32, Shape{}, 99);     // 0-d
  bufs.emplace_back(DType::kInt64, Shape{0, 4}, 100);  // empty
  StateDict sd;
  for (size_t i = 0; i < bufs.size(); ++i) {
    sd.Child("t").Set(
        std::string(DTypeName(bufs[i].dtype)) + "_" + std::to_string(i),
        bufs[i].Whole());
  }
  auto info = db->Save(sd, {.step = 7});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->num_tensors, static_cast<int64_t>(bufs.size()));
  EXPECT_EQ(info->step, 7);

  std::vector<Buf> out;
  for (auto& b : bufs) out.emplace_back(b.dtype, b.shape, 12345);
  StateDict target;
  for (size_t i = 0; i < out.size(); ++i) {
    target.Child("t").Set(
        std::string(DTypeName(out[i].dtype)) + "_" + std::to_string(i),
        out[i].Whole());
  }
  auto loaded = db->Load(target, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (size_t i = 0; i < bufs.size(); ++i)
    EXPECT_EQ(out[i].bytes, bufs[i].bytes) << i;
  EXPECT_TRUE(loaded->missing_keys.empty());
  EXPECT_TRUE(loaded->unexpected_keys.empty());
  EXPECT_EQ(loaded->stats.bytes_read, static_cast<uint64_t>(info->nbytes));
}

TEST(DBTest, ReshardedLoadIntoColumnShardsReadsOnlyNeededChunks) {
  TempDir dir;
  Options options;
  options.max_chunk_bytes =
      4 * 16;  // 4 rows of 16 floats... of w (64 x 16 floats)
  auto db = OpenOrDie(dir.path(), options);
  std::vector<float> w(64 * 16);
  std::iota(w.begin(), w.end(), 0.f);
  StateDict sd;
  sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {64, 16}));
  auto info = db->Save(sd, {});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  auto meta = db->GetMetadata(CheckpointSelector::Latest());
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->tensors.at("w").chunks.size(),
            64u);  // one row (64 bytes) per chunk

  // Rows 10..19, columns 4..11 (a 2-D shard of another layout).
  std::vector<float> part(10 * 8, -1.f);
  StateDict target;
  target.Set("w", TensorView::Shard(part.data(), DType::kFloat32, {10, 8},
                                    {64, 16}, {10, 4}));
  auto loaded = db->Load(target, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (int r = 0; r < 10; ++r) {
    for (int c = 0; c < 8; ++c)
      ASSERT_EQ(part[r * 8 + c], w[(10 + r) * 16 + 4 + c]);
  }
  EXPECT_EQ(loaded->stats.chunks_read, 10u);
  EXPECT_EQ(loaded->stats.bytes_read, 10u * 64);
  EXPECT_EQ(loaded->stats.bytes_needed, 80u * 4);
}

TEST(DBTest, NestedStateWithValuesAndSelectors) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Buf w(DType::kFloat32, {4, 4});
  StateDict sd;
  sd.Child("model").Set("w", w.Whole());
  sd.Child("optimizer").Set("lr", Value(0.01));
  sd.Child("optimizer").Set("name", Value(std::string("adam")));
  sd.Set("step", Value(int64_t{100}));
  sd.Set("done", Value(false));
  sd.Set("rng", Value(Bytes{std::string("\0\xff", 2)}));
  ASSERT_TRUE(
      db->Save(sd,
               {.step = 100, .tag = "first", .user_metadata = {{"run", "a"}}})
          .ok());
  sd.Set("step", Value(int64_t{200}));
  ASSERT_TRUE(db->Save(sd, {.step = 200}).ok());

  StateDict target;
  target.Set("step", Value(int64_t{0}));
  target.Child("optimizer").Set("lr", Value(0.0));
  target.Set("rng", Value(Bytes{}));
  auto loaded = db->Load(target, CheckpointSelector::Tag("first"), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(std::get<int64_t>(*target.GetValue("step")), 100);
  EXPECT_EQ(std::get<double>(*target.GetChild("optimizer")->GetValue("lr")),
            0.01);
  EXPECT_EQ(std::get<Bytes>(*target.GetValue("rng")).data,
            std::string("\0\xff", 2));
  EXPECT_EQ(loaded->unexpected_keys,
            (std::vector<std::string>{"done", "model.w", "optimizer.name"}));

  ASSERT_TRUE(db->Load(target, CheckpointSelector::Step(200), {}).ok());
  EXPECT_EQ(std::get<int64_t>(*target.GetValue("step")), 200);
  ASSERT_TRUE(db->Load(target, CheckpointSelector::Id(1), {}).ok());
  EXPECT_EQ(std::get<int64_t>(*target.GetValue("step")), 100);

  auto meta = db->GetMetadata(CheckpointSelector::Tag("first"));
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->flat_mapping.at("optimizer.lr"),
            (std::vector<std::string>{"optimizer", "lr"}));
  EXPECT_EQ(meta->user_metadata.at("run"), "a");
  EXPECT_EQ(meta->info.tag, "first");

  auto list = db->ListCheckpoints();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_LT((*list)[0].id, (*list)[1].id);
  EXPECT_GT((*list)[0].created, 1.6e9);

  auto read = db->Read("model.w", CheckpointSelector::Latest());
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(std::memcmp(read->data.data(), w.bytes.data(), w.bytes.size()), 0);
  EXPECT_EQ(read->shape, (Shape{4, 4}));
  EXPECT_TRUE(
      db->Read("nope", CheckpointSelector::Latest()).status().IsNotFound());
  EXPECT_TRUE(db->Read("step", CheckpointSelector::Latest())
                  .status()
                  .IsInvalidArgument());
}

// A torch-like optimizer state: int keys, a list of dicts, a tuple, None.
StateDict OptimizerLike(Buf& exp_avg, double beta2, int64_t step) {
  StateDict group;
  group.Set("betas",
            StateDict::Tuple().Append(Value(0.9)).Append(Value(beta2)));
  group.Set("foreach", Value(None{}));
  group.Set("params", StateDict::List().Append(Value(step)));
  StateDict sd;
  sd.Child("optim")
      .Child("state")
      .Child(int64_t{0})
      .Set("exp_avg", exp_avg.Whole());
  sd.Child("optim").Set("param_groups",
                        StateDict::List().Append(std::move(group)));
  return sd;
}

TEST(DBTest, IntKeysSequencesAndNoneRoundTripWithTheirKinds) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Buf exp_avg(DType::kFloat32, {3});
  ASSERT_TRUE(db->Save(OptimizerLike(exp_avg, 0.999, 7), {}).ok());

  Buf target_avg(DType::kFloat32, {3}, 2);
  StateDict target = OptimizerLike(target_avg, 0.5, 0);
  auto loaded = db->Load(target, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(target_avg.bytes, exp_avg.bytes);
  const StateDict& group =
      *target.GetChild("optim")->GetChild("param_groups")->GetChild(int64_t{0});
  EXPECT_EQ(*group.GetChild("betas")->GetValue(int64_t{1}), Value(0.999));
  EXPECT_EQ(*group.GetChild("params")->GetValue(int64_t{0}), Value(int64_t{7}));

  auto meta = db->GetMetadata(CheckpointSelector::Latest());
  ASSERT_TRUE(meta.ok());
  using K = PathPartKind;
  EXPECT_EQ(meta->path_kinds.at("optim.state.0.exp_avg"),
            (PathKinds{K::kStrKey, K::kStrKey, K::kIntKey, K::kStrKey}));
  EXPECT_EQ(meta->path_kinds.at("optim.param_groups.0.betas.1"),
            (PathKinds{K::kStrKey, K::kStrKey, K::kListIndex, K::kStrKey,
                       K::kTupleIndex}));
  EXPECT_EQ(meta->values.at("optim.param_groups.0.foreach"), Value(None{}));
  EXPECT_EQ(meta->path_kinds.size(), 5u);
}

TEST(DBTest, StrictAndNonStrictMissingKeys) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Buf a(DType::kInt32, {8});
  StateDict sd;
  sd.Set("a", a.Whole());
  ASSERT_TRUE(db->Save(sd, {}).ok());
  Buf a2(DType::kInt32, {8}, 5), b2(DType::kInt32, {8}, 6);
  const auto b_before = b2.bytes;
  StateDict target;
  target.Set("a", a2.Whole());
  target.Child("extra").Set("b", b2.Whole());
  auto strict = db->Load(target, CheckpointSelector::Latest(), {});
  ASSERT_FALSE(strict.ok());
  EXPECT_TRUE(strict.status().IsNotFound());
  EXPECT_NE(strict.status().message().find("'extra.b'"), std::string::npos);
  auto loose =
      db->Load(target, CheckpointSelector::Latest(), {.strict = false});
  ASSERT_TRUE(loose.ok());
  EXPECT_EQ(loose->missing_keys, (std::vector<std::string>{"extra.b"}));
  EXPECT_EQ(a2.bytes, a.bytes);
  EXPECT_EQ(b2.bytes, b_before);
}

// A missing key that the checkpoint holds under "module." parts (a model
// saved wrapped in DistributedDataParallel, loaded bare, or the reverse) is
// named in the error; an unrelated missing key gets no such hint.
TEST(DBTest, AMissingKeyNamesTheStoredKeyThatDiffersOnlyByModuleParts) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Buf w(DType::kInt32, {8}), b(DType::kInt32, {2});
  StateDict sd;
  sd.Child("model").Child("module").Set("w", w.Whole());
  sd.Child("model").Set("b", b.Whole());
  ASSERT_TRUE(db->Save(sd, {}).ok());
  Buf w2(DType::kInt32, {8}), b2(DType::kInt32, {2}), c2(DType::kInt32, {2});
  StateDict bare;
  bare.Child("model").Set("w", w2.Whole());
  auto missed = db->Load(bare, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(missed.status().IsNotFound()) << missed.status().ToString();
  EXPECT_NE(missed.status().message().find("it holds 'model.module.w'"),
            std::string::npos)
      << missed.status().ToString();
  StateDict wrapped;
  wrapped.Child("model").Child("module").Set("b", b2.Whole());
  missed = db->Load(wrapped, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(missed.status().IsNotFound()) << missed.status().ToString();
  EXPECT_NE(missed.status().message().find("it holds 'model.b'"),
            std::string::npos)
      << missed.status().ToString();
  StateDict other;
  other.Child("model").Set("c", c2.Whole());
  missed = db->Load(other, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(missed.status().IsNotFound()) << missed.status().ToString();
  EXPECT_EQ(missed.status().message().find("it holds"), std::string::npos)
      << missed.status().ToString();
}

TEST(DBTest, DtypeMismatchNeedsCast) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  std::vector<float> w = {1.5f, -2.f, 3.25f, 1e5f};
  StateDict sd;
  sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {4}));
  ASSERT_TRUE(db->Save(sd, {}).ok());
  std::vector<double> d(4);
  StateDict target;
  target.Set("w", TensorView::Whole(d.data(), DType::kFloat64, {4}));
  auto refused = db->Load(target, CheckpointSelector::Latest(), {});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsInvalidArgument());
  EXPECT_NE(refused.status().message().find(
                "target dtype float64 differs from stored float32"),
            std::string::npos);
  ASSERT_TRUE(
      db->Load(target, CheckpointSelector::Latest(), {.cast = true}).ok());
  EXPECT_EQ(d, (std::vector<double>{1.5, -2, 3.25, 1e5}));
  std::vector<uint8_t> flags(4);
  target.Set("w", TensorView::Whole(flags.data(), DType::kBool, {4}));
  auto to_bool = db->Load(target, CheckpointSelector::Latest(), {.cast = true});
  EXPECT_TRUE(to_bool.status().IsInvalidArgument());
  std::vector<float> wrong(6);
  target.Set("w", TensorView::Whole(wrong.data(), DType::kFloat32, {2, 3}));
  auto shape = db->Load(target, CheckpointSelector::Latest(), {});
  EXPECT_TRUE(shape.status().IsInvalidArgument());
  EXPECT_NE(shape.status().message().find(
                "target global shape [2, 3] differs from stored [4]"),
            std::string::npos);
}

TEST(DBTest, ReadOnlyHandleRefusesWritesAndNeverModifiesTheDirectory) {
  TempDir dir;
  Buf w(DType::kUInt8, {100});
  {
    auto db = OpenOrDie(dir.path());
    StateDict sd;
    sd.Set("w", w.Whole());
    ASSERT_TRUE(db->Save(sd, {}).ok());
  }
  const auto before = SnapshotDir(dir.path());
  {
    Options ro;
    ro.read_only = true;
    auto db = OpenOrDie(dir.path(), ro);
    StateDict sd;
    sd.Set("w", w.Whole());
    auto saved = db->Save(sd, {});
    EXPECT_EQ(saved.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(saved.status().message().find("read-only"), std::string::npos);
    EXPECT_FALSE(db->Delete(CheckpointSelector::Latest()).ok());
    ASSERT_TRUE(db->Load(sd, CheckpointSelector::Latest(), {}).ok());
    ASSERT_TRUE(db->Verify(CheckpointSelector::Latest()).ok());
    ASSERT_TRUE(db->ListCheckpoints().ok());
  }
  EXPECT_EQ(SnapshotDir(dir.path()), before);
}

// Runs `action` once, before the store's first file operation that `when`
// picks.
class OnceBefore : public FileSystemHooks {
 public:
  OnceBefore(std::function<bool(FileOp, std::string_view)> when,
             std::function<void()> action)
      : when_(std::move(when)), action_(std::move(action)) {}
  int BeforeOperation(FileOp op, std::string_view path, uint64_t) override {
    if (action_ && when_(op, path)) {
      std::function<void()> action = std::move(action_);
      action_ = nullptr;
      action();
    }
    return 0;
  }
  void Freeing(std::string_view, uint64_t) override {}
  bool ran() const { return !action_; }

 private:
  std::function<bool(FileOp, std::string_view)> when_;
  std::function<void()> action_;
};

void CheckStoreWhileAWriterWrites(bool commit);

// A read-only handle sees the store as it was when it opened; a commit or a
// delete that lands while it checks the store is outside its view, not
// damage.
TEST(DBTest, AReadOnlyStoreCheckIgnoresWritesMadeSinceItOpened) {
  for (const bool commit : {true, false}) {
    SCOPED_TRACE(commit ? "a commit" : "a delete");
    ASSERT_NO_FATAL_FAILURE(CheckStoreWhileAWriterWrites(commit));
  }
}

void CheckStoreWhileAWriterWrites(bool commit) {
  TempDir dir;
  Buf w(DType::kFloat32, {1000});
  StateDict sd;
  sd.Set("w", w.Whole());
  auto writer = OpenOrDie(dir.path());
  // Every step changes the tensor, so that no checkpoint shares another's
  // chunks and a delete removes them.
  ASSERT_TRUE(writer->Save(sd, {.step = 1}).ok());
  ++w.bytes[0];
  ASSERT_TRUE(writer->Save(sd, {.step = 2}).ok());
  ++w.bytes[0];
  Status later;
  const auto listing_copies = [](FileOp op, std::string_view path) {
    return op == FileOp::kStat && path.ends_with("/copies");
  };
  auto hooks = std::make_shared<OnceBefore>(listing_copies, [&] {
    later = commit ? writer->Save(sd, {.step = 3}).status()
                   : writer->Delete(CheckpointSelector::Step(1));
  });
  Options ro;
  ro.read_only = true;
  ro.file_system_hooks = hooks;
  auto reader = OpenOrDie(dir.path(), ro);
  ASSERT_EQ(reader->ListCheckpoints()->size(), 2u);
  auto report = reader->CheckStore();
  ASSERT_TRUE(hooks->ran());
  ASSERT_TRUE(later.ok()) << later.ToString();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << (report->repairable_metadata.empty()
                                    ? std::string("damage")
                                    : report->repairable_metadata.front());
}

// A reader that loads "the latest" beside a writer whose retention deletes
// the checkpoint the load is reading loads the newer one; a load of that
// checkpoint by id says it is gone, and so does a non-strict load of the
// latest (the newer checkpoint might lack keys it had begun to fill).
TEST(DBTest, ALoadOfTheLatestStartsAgainWhenTheWriterDeletesItMeanwhile) {
  TempDir dir;
  Buf w(DType::kFloat32, {1 << 14});  // 64 KiB: its own value file
  StateDict sd;
  sd.Set("w", w.Whole());
  Options keep_one;
  keep_one.keep_last = 1;
  auto writer = OpenOrDie(dir.path(), keep_one);
  ASSERT_TRUE(writer->Save(sd, {.step = 1}).ok());
  enum class How { kLatest, kById, kLatestNotStrict };
  for (const How how : {How::kLatest, How::kById, How::kLatestNotStrict}) {
    const bool latest = how != How::kById;
    SCOPED_TRACE(how == How::kLatest ? "the latest"
                 : latest            ? "the latest, not strict"
                                     : "by id");
    ++w.bytes[0];
    const std::vector<uint8_t> newer = w.bytes;
    Status saved;
    // As the reader opens the value file of the checkpoint it reads, the
    // writer commits another and deletes it, files and all.
    const auto opening_a_value_file = [](FileOp op, std::string_view path) {
      return op == FileOp::kOpen && path.find("/values/") != path.npos;
    };
    auto hooks = std::make_shared<OnceBefore>(opening_a_value_file, [&] {
      saved = writer->Save(sd, {}).status();
      if (saved.ok()) saved = writer->CheckStore().status();  // files gone
    });
    Options ro;
    ro.read_only = true;
    ro.file_system_hooks = hooks;
    auto reader = OpenOrDie(dir.path(), ro);
    auto listed = reader->ListCheckpoints();
    ASSERT_TRUE(listed.ok());
    const int64_t id = listed->back().id;
    Buf target(DType::kFloat32, {1 << 14}, 7);
    StateDict into;
    into.Set("w", target.Whole());
    auto loaded = reader->Load(
        into,
        latest ? CheckpointSelector::Latest() : CheckpointSelector::Id(id),
        {.strict = how != How::kLatestNotStrict});
    ASSERT_TRUE(hooks->ran());
    ASSERT_TRUE(saved.ok()) << saved.ToString();
    if (how == How::kLatest) {
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_EQ(target.bytes, newer);
      continue;
    }
    EXPECT_TRUE(loaded.status().IsNotFound()) << loaded.status().ToString();
    EXPECT_NE(loaded.status().message().find(
                  "checkpoint id " + std::to_string(id) +
                  " was deleted by the store's writer while it was read"),
              std::string::npos)
        << loaded.status().ToString();
    if (how == How::kLatestNotStrict) {
      EXPECT_NE(loaded.status().message().find("strict off"), std::string::npos)
          << loaded.status().ToString();
    }
  }
}

TEST(DBTest, OpenRejectsNonStoreAndBadOptions) {
  TempDir dir;
  std::ofstream(dir.Sub("file.bin")) << "data";
  auto db = DB::Open(Options(), dir.path());
  ASSERT_FALSE(db.ok());
  EXPECT_TRUE(db.status().IsInvalidArgument());
  EXPECT_NE(db.status().message().find(dir.path()), std::string::npos);
  Options bad;
  bad.max_chunk_bytes = 0;
  EXPECT_TRUE(DB::Open(bad, dir.Sub("new")).status().IsInvalidArgument());
  bad.max_chunk_bytes = kMaxChunkBytes + 1;
  EXPECT_TRUE(DB::Open(bad, dir.Sub("new")).status().IsInvalidArgument());
  bad = Options();
  bad.io_threads = kMaxIoThreads + 1;
  const Status too_many = DB::Open(bad, dir.Sub("new")).status();
  EXPECT_TRUE(too_many.IsInvalidArgument()) << too_many.ToString();
  EXPECT_NE(too_many.message().find("io_threads"), std::string::npos);
  bad.io_threads = kMaxIoThreads;
  EXPECT_TRUE(DB::Open(bad, dir.Sub("new")).ok());
  // A path the system would cut at a NUL: refused, and nothing made at the
  // part before it.
  const Status nul =
      DB::Open(Options(), dir.Sub("cut") + std::string("\0rest", 5)).status();
  EXPECT_TRUE(nul.IsInvalidArgument()) << nul.ToString();
  EXPECT_NE(nul.message().find("NUL"), std::string::npos) << nul.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("cut")));
  // One writer at a time: a second read-write handle is refused, a read-only
  // one is fine.
  auto first = DB::Open(Options(), dir.Sub("store"));
  ASSERT_TRUE(first.ok());
  auto second = DB::Open(Options(), dir.Sub("store"));
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition)
      << second.status().ToString();
  Options ro;
  ro.read_only = true;
  EXPECT_TRUE(DB::Open(ro, dir.Sub("store")).ok());
  Options no_create;
  no_create.create_if_missing = false;
  EXPECT_TRUE(DB::Open(no_create, dir.Sub("absent")).status().IsNotFound());
}

TEST(DBTest, DeleteAndMissingCheckpoints) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Buf w(DType::kFloat32, {1000});
  StateDict sd;
  sd.Set("w", w.Whole());
  ASSERT_TRUE(db->Save(sd, {.step = 1}).ok());
  ASSERT_TRUE(db->Save(sd, {.step = 2}).ok());
  ASSERT_TRUE(db->Delete(CheckpointSelector::Step(1)).ok());
  auto list = db->ListCheckpoints();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 2);
  auto gone = db->Load(sd, CheckpointSelector::Step(1), {});
  EXPECT_TRUE(gone.status().IsNotFound());
  EXPECT_NE(gone.status().message().find("step 1"), std::string::npos);
  EXPECT_TRUE(db->Delete(CheckpointSelector::Tag("x")).IsNotFound());
  EXPECT_TRUE(db->GetMetadata(CheckpointSelector::Id(9)).status().IsNotFound());
  ASSERT_TRUE(db->Close().ok());
  EXPECT_EQ(db->Save(sd, {}).status().code(), StatusCode::kFailedPrecondition);
}

// keep_last 2 and keep_every_steps 3 over steps 0..9, step 4 tagged: after
// each save the newest two stay, with steps 0, 3, 6 and the tagged one.
TEST(DBTest, RetentionDeletesOldCheckpointsAfterEachCommit) {
  TempDir dir;
  Options options;
  options.keep_last = 2;
  options.keep_every_steps = 3;
  auto db = OpenOrDie(dir.path(), options);
  Buf w(DType::kFloat32, {1000});
  StateDict sd;
  sd.Set("w", w.Whole());
  for (int64_t step = 0; step < 10; ++step) {
    SaveOptions so{.step = step};
    if (step == 4) so.tag = "best";
    ASSERT_TRUE(db->Save(sd, so).ok()) << step;
    auto list = db->ListCheckpoints();
    ASSERT_TRUE(list.ok());
    std::vector<int64_t> steps;
    for (const auto& info : *list) steps.push_back(*info.step);
    std::vector<int64_t> want;
    for (int64_t s = 0; s <= step; ++s) {
      if (s >= step - 1 || s % 3 == 0 || s == 4) want.push_back(s);
    }
    EXPECT_EQ(steps, want) << "after step " << step;
  }
  // Deleted checkpoints are gone for good; kept ones load.
  EXPECT_TRUE(
      db->Load(sd, CheckpointSelector::Step(5), {}).status().IsNotFound());
  EXPECT_TRUE(db->Load(sd, CheckpointSelector::Tag("best"), {}).ok());
  Options bad;
  bad.keep_last = 0;
  auto refused = DB::Open(bad, dir.Sub("other"));
  EXPECT_TRUE(refused.status().IsInvalidArgument());
  EXPECT_NE(refused.status().message().find("keep_last"), std::string::npos);
  bad.keep_last.reset();
  bad.keep_every_steps = -3;
  EXPECT_TRUE(DB::Open(bad, dir.Sub("other")).status().IsInvalidArgument());
}
// File-system hooks a user writes: they record each operation of the store
// and, once told to, refuse the writes of the first table file (".sst") they
// see written with a quota errno.
class QuotaHooks : public FileSystemHooks {
 public:
  struct Call {
    FileOp op;
    std::string path;
    uint64_t bytes;
  };
  int BeforeOperation(FileOp op, std::string_view path,
                      uint64_t bytes) override {
    std::lock_guard lock(mu_);
    calls_.push_back({op, std::string(path), bytes});
    if (!refusing_ || op != FileOp::kWrite || !path.ends_with(".sst")) return 0;
    if (refused_.empty()) refused_ = std::string(path);
    return path == refused_ ? EDQUOT : 0;
  }
  void Refuse(bool on) {
    std::lock_guard lock(mu_);
    refusing_ = on;
    refused_.clear();
  }
  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::string refused() const {
    std::lock_guard lock(mu_);
    return refused_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  bool refusing_ = false;
  std::string refused_;
};

// Options::file_system_hooks see every file operation of an open and a save,
// each on the store directory, a path inside it or (syncing the directory it
// creates) its parent, writes with their bytes; an
// errno they return fails the save with an IOError naming the operation, the
// path and the errno, the store keeps the checkpoints it had, and the next save
// succeeds.
TEST(DBTest, FileSystemHooksSeeEveryOperationAndCanFailOne) {
  TempDir dir;
  auto hooks = std::make_shared<QuotaHooks>();
  auto db = OpenOrDie(dir.path(), WithHooks(hooks));
  ASSERT_NE(db, nullptr);
  Buf w(DType::kFloat32, {300, 500});
  StateDict sd;
  sd.Set("w", w.Whole());
  const size_t before = hooks->calls().size();
  ASSERT_TRUE(db->Save(sd, {.step = 1}).ok());
  const std::vector<QuotaHooks::Call> calls = hooks->calls();
  ASSERT_GT(calls.size(), before);
  const std::string parent =
      std::filesystem::path(dir.path()).parent_path().string();
  uint32_t seen = 0;
  uint64_t written = 0;
  for (const auto& call : calls) {
    EXPECT_TRUE(call.path == dir.path() || call.path == parent ||
                call.path.rfind(dir.path() + "/", 0) == 0)
        << FileOpName(call.op) << " " << call.path;
    seen |= FileOpMask(call.op);
    if (call.op == FileOp::kWrite) {
      written += call.bytes;
    } else {
      EXPECT_EQ(call.bytes, 0u) << FileOpName(call.op) << " " << call.path;
    }
  }
  for (FileOp op : {FileOp::kOpen, FileOp::kRead, FileOp::kWrite, FileOp::kSync,
                    FileOp::kSyncDir, FileOp::kClose, FileOp::kStat}) {
    EXPECT_NE(seen & FileOpMask(op), 0u) << FileOpName(op);
  }
  EXPECT_GE(written, w.bytes.size());

  hooks->Refuse(true);
  auto refused = db->Save(sd, {.step = 2});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsIOError()) << refused.status().ToString();
  const std::string message = refused.status().message();
  EXPECT_FALSE(hooks->refused().empty());
  for (const std::string& part : {std::string("write ") + hooks->refused(),
                                  std::string("Options::file_system_hooks"),
                                  std::string(std::strerror(EDQUOT))}) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "'" << part << "' not in: " << message;
  }

  hooks->Refuse(false);
  auto list = db->ListCheckpoints();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].step, 1);
  ASSERT_TRUE(db->Save(sd, {.step = 3}).ok());
  Buf out(DType::kFloat32, {300, 500}, /*seed=*/2);
  StateDict target;
  target.Set("w", out.Whole());
  ASSERT_TRUE(db->Load(target, CheckpointSelector::Step(3), {}).ok());
  EXPECT_EQ(out.bytes, w.bytes);
  ASSERT_TRUE(db->Close().ok());
}

TEST(DBTest, DamagedChunkFailsLoadAndVerify) {
  TempDir dir;
  Buf w(DType::kUInt8, {1 << 16}, 3);
  {
    auto db = OpenOrDie(dir.path());
    StateDict sd;
    sd.Set("w", w.Whole());
    ASSERT_TRUE(db->Save(sd, {}).ok());
  }
  const std::string probe(reinterpret_cast<const char*>(w.bytes.data()) + 1000,
                          64);
  ASSERT_TRUE(ckptdb::testing::DamageStoredBytes(dir.path(), probe, 10));
  auto db = OpenOrDie(dir.path());
  Buf out(DType::kUInt8, {1 << 16});
  StateDict target;
  target.Set("w", out.Whole());
  auto loaded = db->Load(target, CheckpointSelector::Latest(), {});
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(loaded.status().IsCorruption());
  EXPECT_NE(loaded.status().message().find("tensor 'w' at offset [0]"),
            std::string::npos);
  auto verified = db->Verify(CheckpointSelector::Latest());
  EXPECT_TRUE(verified.IsCorruption());
  EXPECT_NE(verified.message().find("1 of 1 chunks damaged"),
            std::string::npos);
}

}  // namespace
}  // namespace ckptdb

namespace ckptdb {
namespace {

TEST(DBTest, ValuesOnlyCheckpointAndEmptyLoads) {
  testing::TempDir dir;
  auto db = DB::Open(Options(), dir.path());
  ASSERT_TRUE(db.ok());
  StateDict sd;
  sd.Child("trainer").Set("epoch", Value(int64_t{3}));
  sd.Child("trainer").Set("note", Value(std::string("values only")));
  auto info = (*db)->Save(sd, {});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->num_tensors, 0);
  EXPECT_EQ(info->nbytes, 0);
  StateDict empty;
  auto result = (*db)->Load(empty, CheckpointSelector::Latest(), {});
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->unexpected_keys,
            (std::vector<std::string>{"trainer.epoch", "trainer.note"}));
  StateDict target;
  target.Child("trainer").Set("epoch", Value(int64_t{0}));
  ASSERT_TRUE((*db)->Load(target, CheckpointSelector::Latest(), {}).ok());
  EXPECT_EQ(std::get<int64_t>(*target.GetChild("trainer")->GetValue("epoch")),
            3);
}

}  // namespace
}  // namespace ckptdb
