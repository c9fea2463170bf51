#include "storage/writer_claim.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <mutex>

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;

// The claims of this process: each directory's resolved path and identity,
// with the path its holder was opened with.
struct Claims {
  std::mutex mu;
  std::map<std::string, std::string> by_path;
  std::map<std::pair<dev_t, ino_t>, std::string> by_identity;
};

Claims& TheClaims() {
  static Claims* claims = new Claims;  // never destroyed: handles may outlive
  return *claims;                      // static destruction
}

// `path` made absolute, with what exists of it resolved (symlinks, "." and
// ".."), and without a trailing slash; lexically when it cannot be resolved.
std::string Resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = fs::path(path);
  fs::path resolved = fs::weakly_canonical(p, ec);
  if (ec) resolved = p.lexically_normal();
  std::string out = resolved.string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::optional<std::pair<dev_t, ino_t>> IdentityOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

Status Held(const std::string& path, const std::string& holder) {
  return Status::FailedPrecondition(
      "store '" + path +
      "' is open for writing by another handle in this process (close it "
      "first)" +
      (holder == path ? "" : ", opened as '" + holder + "'"));
}

}  // namespace

Result<std::unique_ptr<WriterClaim>> WriterClaim::Take(
    const std::string& path) {
  const std::string resolved = Resolved(path);
  const std::optional<std::pair<dev_t, ino_t>> identity = IdentityOf(resolved);
  Claims& claims = TheClaims();
  std::lock_guard lock(claims.mu);
  if (auto it = claims.by_path.find(resolved); it != claims.by_path.end())
    return Held(path, it->second);
  if (identity) {
    if (auto it = claims.by_identity.find(*identity);
        it != claims.by_identity.end())
      return Held(path, it->second);
    claims.by_identity.emplace(*identity, path);
  }
  claims.by_path.emplace(resolved, path);
  // Only a claim that was taken releases anything.
  std::unique_ptr<WriterClaim> claim(new WriterClaim);
  claim->resolved_ = resolved;
  claim->identity_ = identity;
  return claim;
}

void WriterClaim::ClaimCreatedDirectory() {
  if (identity_) return;
  std::optional<std::pair<dev_t, ino_t>> identity = IdentityOf(resolved_);
  if (!identity) return;
  Claims& claims = TheClaims();
  std::lock_guard lock(claims.mu);
  if (claims.by_identity.emplace(*identity, claims.by_path[resolved_]).second)
    identity_ = identity;
}

WriterClaim::~WriterClaim() {
  Claims& claims = TheClaims();
  std::lock_guard lock(claims.mu);
  claims.by_path.erase(resolved_);
  if (identity_) claims.by_identity.erase(*identity_);
}

}  // namespace ckptdb::storage
