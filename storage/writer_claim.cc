#include "storage/writer_claim.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "storage/file_system.h"

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;

// One key's holder.
struct Holder {
  const WriterClaim* claim;
  pid_t pid;         // the process that took it
  std::string path;  // as its caller spelled it
};

struct Claims {
  std::mutex mu;
  std::map<std::string, Holder> by_key;
  // The lock descriptors of this process's claims (LockDirectory).
  std::vector<int*> lock_fds;
};

Claims& TheClaims() {
  static Claims* claims = new Claims;  // never destroyed: handles may outlive
  return *claims;                      // static destruction
}

std::string IdentityKey(const char* kind, const struct stat& st) {
  return std::string(kind) + std::to_string(st.st_dev) + ":" +
         std::to_string(st.st_ino);
}

// The key of the directory at `resolved` by its own device and inode;
// nullopt when there is none.
std::optional<std::string> DirectoryKey(const std::string& resolved) {
  struct stat st;
  if (::stat(resolved.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return std::nullopt;
  return IdentityKey("dir:", st);
}

// The keys of the directory at `resolved` (ResolvedPath): its parent's (the
// deepest existing directory above it, and the rest of the path) with its
// name, and its own identity when it exists; its path alone when nothing
// above it can be looked at.
std::vector<std::string> KeysOf(const std::string& resolved) {
  std::vector<std::string> keys;
  const fs::path path(resolved);
  fs::path above = path.parent_path();
  std::string rest = path.filename().string();
  struct stat st;
  while (::stat(above.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (above == above.root_path() || above.empty()) {
      keys.push_back("path:" + resolved);
      break;
    }
    rest = above.filename().string() + "/" + rest;
    above = above.parent_path();
  }
  if (keys.empty()) keys.push_back(IdentityKey("below:", st) + "/" + rest);
  if (std::optional<std::string> own = DirectoryKey(resolved))
    keys.push_back(*std::move(own));
  return keys;
}

// Whether `holder` is a claim of this process: a forked child inherits its
// parent's claims, whose handles it cannot use. (A claim whose directory was
// renamed or removed stays in the way: its handle still writes there, or
// through its path.)
bool InTheWay(const Holder& holder) { return holder.pid == ::getpid(); }

Status Held(const std::string& path, const std::string& holder) {
  return Status::FailedPrecondition(
      "store '" + path +
      "' is open for writing by another handle in this process (close it "
      "first)" +
      (holder == path ? "" : ", opened as '" + holder + "'"));
}

// Adds `keys` for `claim`, or none of them when one is held (Held).
Status Register(const WriterClaim* claim, const std::string& path,
                const std::vector<std::string>& keys) {
  Claims& claims = TheClaims();
  std::lock_guard lock(claims.mu);
  for (const std::string& key : keys) {
    auto it = claims.by_key.find(key);
    if (it == claims.by_key.end() || it->second.claim == claim) continue;
    if (InTheWay(it->second)) return Held(path, it->second.path);
    claims.by_key.erase(it);  // the parent process's
  }
  for (const std::string& key : keys)
    claims.by_key.insert_or_assign(key, Holder{claim, ::getpid(), path});
  return Status::OK();
}

// Fork handlers: the registry is not changed across a fork, and the child
// closes its copies of the lock descriptors (an flock belongs to the open
// file description, which would otherwise keep the parent's stores locked
// for as long as the child lives, even once the parent closed them).
void BeforeFork() { TheClaims().mu.lock(); }
void AfterForkInParent() { TheClaims().mu.unlock(); }
void AfterForkInChild() {
  Claims& claims = TheClaims();
  for (int* fd : claims.lock_fds) {
    ::close(*fd);
    *fd = -1;
  }
  claims.lock_fds.clear();
  claims.mu.unlock();
}

Status LockHeld(const std::string& path) {
  return Status::FailedPrecondition(
      "store '" + path +
      "' is open for writing by another process (it holds the lock on the "
      "store's directory); nothing was changed");
}

}  // namespace

Status WriterClaim::LockDirectory() {
  if (lock_fd_ >= 0) return Status::OK();
  static std::once_flag handlers;
  std::call_once(handlers, [] {
    pthread_atfork(&BeforeFork, &AfterForkInParent, &AfterForkInChild);
  });
  const int fd = ::open(resolved_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Status::IOError("opening the directory of store '" + path_ +
                           "' to lock it: " + std::strerror(errno));
  }
  int locked;
  do {
    locked = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (locked != 0 && errno == EINTR);
  if (locked != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) return LockHeld(path_);
    // A file system without flock (some network and parallel file systems,
    // mounted so) refuses the call: the open goes on without this lock, as
    // opens did before there was one, and RocksDB's LOCK guards the store
    // once it holds a database.
    if (error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP ||
        error == EINVAL)
      return Status::OK();
    return Status::IOError("locking the directory of store '" + path_ +
                           "': " + std::strerror(error));
  }
  Claims& claims = TheClaims();
  std::lock_guard lock(claims.mu);
  lock_fd_ = fd;
  claims.lock_fds.push_back(&lock_fd_);
  return Status::OK();
}

bool WriterClaim::WriterHolds(const std::string& resolved) {
  struct stat st;
  if (::stat(resolved.c_str(), &st) != 0) return false;
  std::FILE* locks = std::fopen("/proc/locks", "re");
  if (locks == nullptr) return false;
  // "1: FLOCK  ADVISORY  WRITE 2627 fe:00:10977425 0 EOF"; a waiter's line
  // has "->" after the number.
  char line[512];
  bool held = false;
  while (!held && std::fgets(line, sizeof line, locks) != nullptr) {
    char type[16], mode[16], access[16];
    long pid = 0;
    unsigned major_id = 0, minor_id = 0;
    unsigned long inode = 0;
    held = std::sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%lu", type, mode,
                       access, &pid, &major_id, &minor_id, &inode) == 7 &&
           std::strcmp(type, "FLOCK") == 0 && major_id == major(st.st_dev) &&
           minor_id == minor(st.st_dev) && inode == st.st_ino;
  }
  std::fclose(locks);
  return held;
}

Result<std::unique_ptr<WriterClaim>> WriterClaim::Take(
    const std::string& path) {
  std::unique_ptr<WriterClaim> claim(new WriterClaim);
  claim->path_ = path;
  claim->resolved_ = ResolvedPath(path);
  const std::vector<std::string> keys = KeysOf(claim->resolved_);
  CKPTDB_RETURN_IF_ERROR(Register(claim.get(), path, keys));
  claim->keys_ = keys;
  return claim;
}

Status WriterClaim::ClaimOpenedDirectory() {
  std::vector<std::string> added;
  for (const std::string& key : KeysOf(resolved_)) {
    if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
      added.push_back(key);
  }
  if (!added.empty()) {
    CKPTDB_RETURN_IF_ERROR(Register(this, path_, added));
    keys_.insert(keys_.end(), added.begin(), added.end());
  }
  directory_ = DirectoryKey(resolved_).value_or("");
  return Status::OK();
}

bool WriterClaim::StillAtItsPath() const {
  return directory_.empty() || DirectoryKey(resolved_) == directory_;
}

WriterClaim::~WriterClaim() {
  Claims& claims = TheClaims();
  std::lock_guard lock(claims.mu);
  std::erase(claims.lock_fds, &lock_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  for (const std::string& key : keys_) {
    auto it = claims.by_key.find(key);
    if (it != claims.by_key.end() && it->second.claim == this)
      claims.by_key.erase(it);
  }
}

}  // namespace ckptdb::storage
