// A store handle and the directory it holds: one read-write handle per
// directory however its path is spelled, the path resolved at open, and a
// directory moved, removed or forked away from under the handle.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "storage/store.h"
#include "storage/store_testing.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::ExitCodeOfChild;
using ckptdb::testing::TempDir;
using testing::SaveBytes;

// Stops a store's first operation on a file named `name`: says so on `ready`,
// then waits for a byte on `go`.
class PauseAt : public FileSystemHooks {
 public:
  PauseAt(std::string name, int ready, int go)
      : name_(std::move(name)), ready_(ready), go_(go) {}
  int BeforeOperation(FileOp, std::string_view path, uint64_t) override {
    if (path.ends_with(name_) && !paused_.exchange(true)) {
      char byte = 1;
      if (::write(ready_, &byte, 1) == 1) (void)!::read(go_, &byte, 1);
    }
    return 0;
  }

 private:
  const std::string name_;
  const int ready_, go_;
  std::atomic<bool> paused_{false};
};

// A pipe closed with the test.
struct Pipe {
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

// Whether a byte arrives on `fd` within a minute.
bool Arrives(int fd) {
  pollfd ready{fd, POLLIN, 0};
  return ::poll(&ready, 1, 60'000) == 1;
}

// While another process creates a store, a read-write open of it is refused
// and changes nothing: the creator's checkpoint is the store's.
TEST(StoreTest, AStoreAnotherProcessIsCreatingIsRefusedAndLeftToIt) {
  TempDir dir;
  const std::string path = dir.Sub("new");
  Pipe ready, go;
  std::optional<int> creator;
  std::thread watcher([&] {
    creator = ExitCodeOfChild([&] {
      StoreOptions options;
      options.file_system_hooks =
          std::make_shared<PauseAt>("CKPTDB_CREATING", ready.fds[1], go.fds[0]);
      auto store = Store::Open(path, options);
      if (!store.ok()) return 1;
      return SaveBytes(**store, "creator's", 1).ok() ? 0 : 2;
    });
  });
  const bool paused = Arrives(ready.fds[0]);
  Result<std::unique_ptr<Store>> second = Status::Internal("not tried");
  if (paused) second = Store::Open(path, {});
  char byte = 1;
  (void)!::write(go.fds[1], &byte, 1);
  watcher.join();
  ASSERT_TRUE(paused) << "the creating process never reached its marker";
  ASSERT_FALSE(second.ok()) << "two processes hold one new store";
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another process"),
            std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(creator, 0);
  auto store = Store::Open(path, {.read_only = true});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto listed = (*store)->List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 1u);
}

// A child forked while a store is open does not keep it locked: the parent
// closes it and opens it again while the child still runs.
TEST(StoreTest, AForkedChildDoesNotKeepItsParentsStoreLocked) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("store"), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Pipe ready, go;
  std::optional<int> child;
  std::thread watcher([&] {
    child = ExitCodeOfChild([&] {
      char byte = 1;
      if (::write(ready.fds[1], &byte, 1) != 1) return 1;
      return ::read(go.fds[0], &byte, 1) == 1 ? 0 : 2;
    });
  });
  const bool started = Arrives(ready.fds[0]);
  store->reset();
  auto again = Store::Open(dir.Sub("store"), {});
  char byte = 1;
  (void)!::write(go.fds[1], &byte, 1);
  watcher.join();
  ASSERT_TRUE(started);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(child, 0);
}

// A second read-write handle of a store is refused, saying whether the first
// is in this process; the store opens again once the first is closed.
TEST(StoreTest, ASecondWritableHandleInTheSameProcessIsRefusedNamingIt) {
  TempDir dir;
  auto first = Store::Open(dir.path(), {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Store::Open(dir.path(), {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another handle in this process"),
            std::string::npos)
      << second.status().ToString();
  first->reset();
  EXPECT_TRUE(Store::Open(dir.path(), {}).ok());
}

// However the path of an open store is spelled, a second read-write handle
// of it in this process is refused, before it touches the store: the two
// would commit the same checkpoint ids, and the second's close would drop
// the lock that keeps other processes out. Read-only handles still open.
TEST(StoreTest, ASecondWritableHandleIsRefusedHoweverItsPathIsSpelled) {
  TempDir dir;
  const std::string store = dir.Sub("store");
  const std::filesystem::path parent = std::filesystem::path(dir.path());
  std::filesystem::create_directory_symlink(store, dir.Sub("link"));
  std::filesystem::create_directory_symlink(parent, dir.Sub("up"));
  const std::string relative =
      std::filesystem::relative(store, std::filesystem::current_path())
          .string();
  const std::vector<std::string> spellings = {store + "/",
                                              store + "//",
                                              store + "/.",
                                              dir.path() + "//store",
                                              store + "/../store",
                                              dir.Sub("link"),
                                              dir.Sub("link") + "/",
                                              dir.Sub("up") + "/store",
                                              relative};
  auto first = Store::Open(store, {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(SaveBytes(**first, "kept", 1).ok());
  for (const std::string& other : spellings) {
    auto second = Store::Open(other, {});
    ASSERT_FALSE(second.ok()) << other;
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition) << other;
    EXPECT_NE(second.status().message().find(
                  "another handle in this process (close it first), opened "
                  "as '" +
                  store + "'"),
              std::string::npos)
        << second.status().ToString();
    StoreOptions read_only;
    read_only.read_only = true;
    auto reader = Store::Open(other, read_only);
    ASSERT_TRUE(reader.ok()) << other << ": " << reader.status().ToString();
    EXPECT_EQ((*reader)->List()->size(), 1u) << other;
  }
  // The first handle still holds the store: its next commit is the only one.
  ASSERT_TRUE(SaveBytes(**first, "more", 1).ok());
  EXPECT_EQ((*first)->List()->size(), 2u);
  first->reset();
  for (const std::string& other : spellings) {
    auto again = Store::Open(other, {});
    EXPECT_TRUE(again.ok()) << other << ": " << again.status().ToString();
  }
}

// Two new stores opened through two spellings of one path: the second open
// is refused too, though the directory did not exist before the first.
TEST(StoreTest, ASecondWritableHandleOfANewStoreIsRefused) {
  TempDir dir;
  auto first = Store::Open(dir.Sub("new"), {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = Store::Open(dir.Sub("new") + "/", {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
}

// Two threads open one new store, nested in a directory not there yet, under
// two spellings: one handle wins, the other is refused, and the winner still
// holds the store's lock (another process cannot take it).
TEST(StoreTest,
     TwoThreadsOpeningANewStoreUnderTwoSpellingsLeaveOneLockedHandle) {
  TempDir dir;
  for (int k = 0; k < 20; ++k) {
    const std::string path =
        (std::filesystem::path(dir.path()) / std::to_string(k) / "store")
            .string();
    Result<std::unique_ptr<Store>> opened[2] = {Status::Internal("not run"),
                                                Status::Internal("not run")};
    std::thread first([&] { opened[0] = Store::Open(path, {}); });
    std::thread second([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(k % 7));
      opened[1] = Store::Open(path + "/", {});
    });
    first.join();
    second.join();
    ASSERT_NE(opened[0].ok(), opened[1].ok())
        << k << ": " << opened[0].status().ToString() << " / "
        << opened[1].status().ToString();
    const std::optional<int> held = ExitCodeOfChild([&] {
      const int fd = ::open((path + "/LOCK").c_str(), O_RDWR);
      return fd >= 0 && ::lockf(fd, F_TLOCK, 0) != 0 ? 0 : 1;
    });
    EXPECT_EQ(held, 0) << k << ": the winner's lock is free";
  }
}

// A process forked from one whose stores ran RocksDB's background jobs
// creates, opens and commits to stores of its own: their flushes run in the
// child, which inherits RocksDB's thread pools without their threads.
// A new store named by a bare relative name ("ckpt", "ckpt/") is created in
// the working directory, whose entry is synced like any parent's.
TEST(StoreTest, ANewStoreUnderABareRelativeNameIsCreatedAndReopens) {
  TempDir dir;
  const std::filesystem::path was = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  for (const std::string name : {"ckpt", "other/"}) {
    {
      auto store = Store::Open(name, {});
      ASSERT_TRUE(store.ok()) << name << ": " << store.status().ToString();
      ASSERT_TRUE(SaveBytes(**store, "bytes", 1).ok()) << name;
    }
    auto again = Store::Open(name, {});
    ASSERT_TRUE(again.ok()) << name << ": " << again.status().ToString();
    EXPECT_EQ((*again)->List()->size(), 1u) << name;
    EXPECT_TRUE(std::filesystem::exists(dir.Sub(name) + "/CURRENT")) << name;
  }
  std::filesystem::current_path(was);
}

// A handle stays on the directory it opened: neither a chdir after a
// relative open nor a symlink retargeted after an open through it moves its
// later commits elsewhere.
TEST(StoreTest, AHandleStaysOnItsDirectoryAfterAChdirOrARetargetedSymlink) {
  TempDir dir, elsewhere;
  const std::filesystem::path was = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  {
    auto store = Store::Open("ckpt", {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(SaveBytes(**store, "first", 1).ok());
    std::filesystem::current_path(elsewhere.path());
    ASSERT_TRUE(SaveBytes(**store, "second", 1).ok());
    EXPECT_EQ((*store)->List()->size(), 2u);
  }
  std::filesystem::current_path(was);
  EXPECT_FALSE(std::filesystem::exists(elsewhere.Sub("ckpt")));
  std::filesystem::create_directory(elsewhere.Sub("target"));
  const std::string link = elsewhere.Sub("link");
  std::filesystem::create_directory_symlink(dir.path(), link);
  {
    auto store = Store::Open(link + "/ckpt", {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::filesystem::remove(link);
    std::filesystem::create_directory_symlink(elsewhere.Sub("target"), link);
    ASSERT_TRUE(SaveBytes(**store, "third", 1).ok());
  }
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.Sub("target")));
  auto reopened = Store::Open(dir.Sub("ckpt"), {});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ((*reopened)->List()->size(), 3u);
}

// A store path that is a link to a directory not made yet (`/ckpt ->
// /scratch/job/ckpt` before the job's first save) makes the store where the
// link points, through a chain of links and a relative target too; a link
// loop fails naming the path.
TEST(StoreTest, AStorePathLinkedToADirectoryNotMadeYetMakesItThere) {
  TempDir dir;
  std::filesystem::create_directory(dir.Sub("scratch"));
  std::filesystem::create_symlink("scratch/job", dir.Sub("ckpt"));
  std::filesystem::create_symlink(dir.Sub("ckpt"), dir.Sub("again"));
  for (const std::string& path : {dir.Sub("ckpt"), dir.Sub("again")}) {
    auto store = Store::Open(path, {});
    ASSERT_TRUE(store.ok()) << path << ": " << store.status().ToString();
    ASSERT_TRUE(SaveBytes(**store, "saved", 1).ok());
  }
  EXPECT_TRUE(std::filesystem::is_symlink(dir.Sub("ckpt")));
  auto store = Store::Open(dir.Sub("scratch/job"), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->List()->size(), 2u);
  std::filesystem::create_symlink(dir.Sub("loop"), dir.Sub("loop"));
  auto loop = Store::Open(dir.Sub("loop"), {});
  ASSERT_FALSE(loop.ok());
  EXPECT_NE(loop.status().message().find(
                dir.Sub("loop") + " is a symbolic link to " + dir.Sub("loop")),
            std::string::npos)
      << loop.status().ToString();
}

// A store moved or removed under a read-write handle takes no more writes
// from it: RocksDB would write on into the moved files it holds open and the
// rest would land at the old path, a commit split between the two.
TEST(StoreTest, AHandleWhoseDirectoryWasMovedOrRemovedWritesNothing) {
  TempDir dir;
  const std::string store = dir.Sub("store"), moved = dir.Sub("moved");
  for (const bool remove : {false, true}) {
    SCOPED_TRACE(remove ? "removed" : "moved");
    std::filesystem::remove_all(moved);
    auto handle = Store::Open(store, {});
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    ASSERT_TRUE(SaveBytes(**handle, "kept", 1).ok());
    std::filesystem::rename(store, moved);
    if (remove) std::filesystem::remove_all(moved);
    auto saved = SaveBytes(**handle, "lost", 1);
    ASSERT_FALSE(saved.ok());
    EXPECT_EQ(saved.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(saved.status().message().find("is no longer there"),
              std::string::npos)
        << saved.status().ToString();
    const Status deleted = (*handle)->Delete(1, FileRemoval::kBeforeReturning);
    EXPECT_EQ(deleted.code(), StatusCode::kFailedPrecondition)
        << deleted.ToString();
    EXPECT_FALSE(std::filesystem::exists(store));
    handle->reset();
    if (remove) continue;
    auto reopened = Store::Open(moved, {});
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    auto listed = (*reopened)->List();
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_TRUE(listed->front().damage.empty());
    auto report = (*reopened)->Check();
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->lost_metadata.empty());
    EXPECT_TRUE(report->unaccounted_chunk_ids.empty());
  }
}

TEST(StoreTest, AForkedChildCommitsToStoresOfItsOwn) {
  TempDir dir;
  {
    auto closed = Store::Open(dir.Sub("closed"), {});
    ASSERT_TRUE(closed.ok());
    ASSERT_TRUE(SaveBytes(**closed, "one", 1).ok());
  }
  auto busy = Store::Open(dir.Sub("busy"), {});  // open across the fork
  ASSERT_TRUE(busy.ok());
  ASSERT_TRUE(SaveBytes(**busy, "two", 1).ok());
  const std::optional<int> code = ExitCodeOfChild([&] {
    int code = 0;
    {
      auto fresh = Store::Open(dir.Sub("new"), {});
      if (!fresh.ok() || !SaveBytes(**fresh, "three", 1).ok()) code = 1;
    }
    {
      auto closed = Store::Open(dir.Sub("closed"), {});
      if (!closed.ok() || !SaveBytes(**closed, "four", 1).ok()) {
        code = 2;
      } else if ((*closed)->List()->size() != 2) {
        code = 3;
      }
    }
    return code;
  });
  ASSERT_TRUE(code.has_value()) << "the child still runs after 60 s";
  EXPECT_EQ(*code, 0);
  ASSERT_TRUE(SaveBytes(**busy, "five", 1).ok());
  auto closed = Store::Open(dir.Sub("closed"), {.read_only = true});
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ((*closed)->List()->size(), 2u);
}

}  // namespace
}  // namespace ckptdb::storage
