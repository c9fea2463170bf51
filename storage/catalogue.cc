#include "storage/catalogue.h"

#include <algorithm>
#include <utility>

namespace ckptdb::storage {

std::optional<CommitJournal> CheckpointCatalogue::journal() const {
  std::lock_guard lock(mu_);
  return journal_;
}

std::vector<std::string> CheckpointCatalogue::damaged_copies() const {
  std::lock_guard lock(mu_);
  return damaged_;
}

void CheckpointCatalogue::Adopt(JournalState state) {
  std::lock_guard lock(mu_);
  journal_ = std::move(state.journal);
  damaged_ = std::move(state.damaged);
}

void CheckpointCatalogue::ClearDamagedCopies() {
  std::lock_guard lock(mu_);
  damaged_.clear();
}

Status CheckpointCatalogue::Save(StoreFileSystem& fs, CommitJournal next) {
  {
    std::lock_guard lock(mu_);
    next.sequence = journal_ ? journal_->sequence + 1 : 1;
  }
  CKPTDB_RETURN_IF_ERROR(WriteJournal(fs, path_, next));
  std::lock_guard lock(mu_);
  journal_ = std::move(next);
  return Status::OK();
}

void CheckpointCatalogue::ForgetCommitted(const std::set<int64_t>& ids) {
  std::lock_guard lock(mu_);
  if (!journal_) return;
  for (int64_t id : ids) journal_->committed.erase(id);
}

bool CheckpointCatalogue::Visible(int64_t checkpoint_id) const {
  std::lock_guard lock(mu_);
  return !journal_ || !journal_->deleting.contains(checkpoint_id);
}

bool CheckpointCatalogue::Committed(int64_t checkpoint_id) const {
  std::lock_guard lock(mu_);
  return journal_ && journal_->committed.contains(checkpoint_id);
}

Result<int64_t> CheckpointCatalogue::Resolve(
    const std::vector<CheckpointInfo>& listing,
    const CheckpointSelector& which) const {
  using Kind = CheckpointSelector::Kind;
  if (which.kind == Kind::kInvalid) return Status::InvalidArgument(which.tag);
  if (which.kind < Kind::kLatest || which.kind > Kind::kId) {
    return Status::InvalidArgument(
        "a checkpoint selector of unknown kind " +
        std::to_string(static_cast<int>(which.kind)) +
        " (latest, step, tag or id)");
  }
  std::optional<int64_t> found;
  for (const CheckpointInfo& info : listing) {
    const bool match =
        which.kind == Kind::kLatest ||
        (which.kind == Kind::kId && info.id == which.number) ||
        (which.kind == Kind::kStep && info.step == which.number) ||
        (which.kind == Kind::kTag && info.tag == which.tag);
    // The latest match wins (several checkpoints may share a step).
    if (match) found = info.id;
  }
  if (!found && which.kind == Kind::kLatest)
    return Status::NotFound("store '" + path_ + "' has no checkpoint yet");
  if (!found) {
    return Status::NotFound("no checkpoint with " + which.ToString() +
                            " in store '" + path_ + "'");
  }
  return *found;
}

Status CheckpointCatalogue::CheckTagFree(
    const std::vector<CheckpointInfo>& listing, const std::string& tag) const {
  for (const CheckpointInfo& info : listing) {
    if (info.tag == tag) {
      return Status::InvalidArgument(
          "tag '" + tag + "' already names checkpoint id " +
          std::to_string(info.id) + " in store '" + path_ + "'");
    }
  }
  return Status::OK();
}

int64_t CheckpointCatalogue::NextId(const std::set<int64_t>& live,
                                    const std::set<int64_t>& records) const {
  int64_t next = 1;
  {
    std::lock_guard lock(mu_);
    if (journal_) next = journal_->high_water + 1;
  }
  if (!live.empty()) next = std::max(next, *live.rbegin() + 1);
  if (!records.empty()) next = std::max(next, *records.rbegin() + 1);
  return next;
}

}  // namespace ckptdb::storage
