#include "storage/record_memo.h"

#include <utility>

namespace ckptdb::storage {

std::optional<CheckpointInfo> RecordMemo::Info(int64_t checkpoint_id) const {
  std::lock_guard lock(mu_);
  auto it = infos_.find(checkpoint_id);
  if (it == infos_.end()) return std::nullopt;
  return it->second;
}

void RecordMemo::RememberInfo(const CheckpointInfo& info) {
  std::lock_guard lock(mu_);
  infos_.insert_or_assign(info.id, info);
}

void RecordMemo::ForgetInfo(int64_t checkpoint_id) {
  std::lock_guard lock(mu_);
  ForgetLocked(checkpoint_id);
}

void RecordMemo::ForgetLocked(int64_t checkpoint_id) {
  infos_.erase(checkpoint_id);
  if (decoded_ && decoded_->meta.info.id == checkpoint_id) decoded_.reset();
}

std::optional<std::set<int64_t>> RecordMemo::RecordIds(
    uint64_t* changes) const {
  std::lock_guard lock(mu_);
  *changes = changes_;
  return record_ids_;
}

void RecordMemo::RememberRecordIds(std::set<int64_t> ids, uint64_t changes) {
  std::lock_guard lock(mu_);
  if (changes == changes_) record_ids_ = std::move(ids);
}

std::shared_ptr<const MainRecord> RecordMemo::Decoded(int64_t checkpoint_id,
                                                      uint64_t* changes) const {
  std::lock_guard lock(mu_);
  *changes = changes_;
  if (decoded_ && decoded_->meta.info.id == checkpoint_id) return decoded_;
  return nullptr;
}

void RecordMemo::RememberDecoded(std::shared_ptr<const MainRecord> main,
                                 size_t record_bytes, uint64_t changes) {
  if (record_bytes > kKeptDecodedRecordBytes) return;
  std::lock_guard lock(mu_);
  if (changes == changes_) decoded_ = std::move(main);
}

void RecordMemo::Added(int64_t checkpoint_id) {
  std::lock_guard lock(mu_);
  if (record_ids_) record_ids_->insert(checkpoint_id);
  ++changes_;
}

void RecordMemo::Removed(int64_t checkpoint_id) {
  std::lock_guard lock(mu_);
  ForgetLocked(checkpoint_id);
  if (record_ids_) record_ids_->erase(checkpoint_id);
  ++changes_;
}

void RecordMemo::ForgetAll() {
  std::lock_guard lock(mu_);
  infos_.clear();
  record_ids_.reset();
  decoded_.reset();
  ++changes_;
}

}  // namespace ckptdb::storage
