// A process's claims of store directories (WriterClaim): one directory
// however it is reached, before or after it exists; a parent's claims are
// not a forked child's.
#include "storage/writer_claim.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::ExitCodeOfChild;
using ckptdb::testing::TempDir;

TEST(WriterClaimTest, OneDirectoryHoweverItsPathIsSpelled) {
  TempDir dir;
  std::filesystem::create_directory(dir.Sub("store"));
  std::filesystem::create_directory_symlink(dir.path(), dir.Sub("up"));
  auto first = WriterClaim::Take(dir.Sub("store"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  for (const std::string& other :
       {dir.Sub("store") + "/", dir.Sub("up") + "/store",
        dir.Sub("store") + "/../store/."}) {
    auto second = WriterClaim::Take(other);
    ASSERT_FALSE(second.ok()) << other;
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(
        second.status().message().find("opened as '" + dir.Sub("store") + "'"),
        std::string::npos)
        << second.status().ToString();
  }
  first->reset();
  EXPECT_TRUE(WriterClaim::Take(dir.Sub("store") + "/").ok());
}

// Through a bind mount the two spellings resolve to different paths, and the
// store does not exist yet: its parent's identity still tells them apart.
// (Needs a mount namespace of its own: skipped where the process may not make
// one.)
TEST(WriterClaimTest, ANewDirectoryReachedThroughABindMountIsOneStore) {
  TempDir dir;
  std::filesystem::create_directory(dir.Sub("a"));
  std::filesystem::create_directory(dir.Sub("b"));
  const std::optional<int> status = ExitCodeOfChild([&] {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(dir.Sub("a").c_str(), dir.Sub("b").c_str(), nullptr, MS_BIND,
                nullptr) != 0)
      return 77;
    auto first = WriterClaim::Take(dir.Sub("a") + "/new");
    if (!first.ok()) return 1;
    auto second = WriterClaim::Take(dir.Sub("b") + "/new");
    if (second.ok()) return 2;  // two writers of one new store
    // Once it exists, its own identity joins: the first claims it after its
    // open, and a second spelling is still refused.
    std::filesystem::create_directory(dir.Sub("a") + "/new");
    if (!(*first)->ClaimOpenedDirectory().ok()) return 3;
    if (WriterClaim::Take(dir.Sub("b") + "/new/").ok()) return 4;
    return 0;
  });
  if (status == 77) GTEST_SKIP() << "no mount namespace here";
  EXPECT_EQ(status, 0);
}

TEST(WriterClaimTest, AParentsClaimIsNotInAForkedChildsWay) {
  TempDir dir;
  auto parent = WriterClaim::Take(dir.Sub("store"));
  ASSERT_TRUE(parent.ok());
  // The child inherits the registry, not the handle: its own open goes on to
  // the store's lock, which tells it that another process holds the store.
  EXPECT_EQ(ExitCodeOfChild([&] {
              auto child = WriterClaim::Take(dir.Sub("store") + "/");
              return child.ok() ? 0 : 1;
            }),
            0);
  EXPECT_FALSE(WriterClaim::Take(dir.Sub("store") + "/").ok());
}

}  // namespace
}  // namespace ckptdb::storage
