// A store's metadata records: reading a checkpoint's (whole, or only the
// tensors a load needs), reading them back after a commit, removing them.
#include <rocksdb/db.h>
#include <rocksdb/snapshot.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace {

// An iterator over a checkpoint's tensor records, in key order, bounded by
// the end of its range.
class TensorRecords {
 public:
  TensorRecords(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* meta,
                const rocksdb::ReadOptions& read, int64_t checkpoint_id)
      : end_(MetaRangeEnd(checkpoint_id)), upper_(end_), read_(read) {
    read_.iterate_upper_bound = &upper_;
    it_.reset(db.NewIterator(read_, meta));
    it_->Seek(TensorRecordKey(checkpoint_id, ""));
  }
  rocksdb::Iterator* operator->() { return it_.get(); }

 private:
  std::string end_;
  rocksdb::Slice upper_;
  rocksdb::ReadOptions read_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

// The keys in order, once each (a load passes them sorted already).
std::vector<std::string_view> SortedOnce(
    const std::vector<std::string_view>& tensor_keys) {
  std::vector<std::string_view> wanted(tensor_keys.begin(), tensor_keys.end());
  if (!std::is_sorted(wanted.begin(), wanted.end()))
    std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  return wanted;
}

// Whether `wanted` (sorted) names a small tensor of `main`.
bool AsksForSmallTensors(const MainRecord& main,
                         const std::vector<std::string_view>& wanted) {
  auto asked = wanted.begin();
  size_t ordinal = 0;
  for (const auto& entry : main.meta.tensors) {
    const bool small = main.small[ordinal++];
    while (asked != wanted.end() && *asked < entry.first) ++asked;
    if (asked == wanted.end()) return false;
    if (small && *asked == entry.first) return true;
  }
  return false;
}

}  // namespace

Status StoreImpl::ReadBack(
    int64_t checkpoint_id,
    const std::vector<std::pair<std::string, std::string>>& records) {
  const std::string what =
      "reading back the records of checkpoint " + std::to_string(checkpoint_id);
  const std::string end = MetaRangeEnd(checkpoint_id);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions read;
  read.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, meta_));
  size_t i = 0;
  bool same = true;
  for (it->Seek(MetaKey(checkpoint_id)); it->Valid() && same; it->Next()) {
    same = i < records.size() && it->key() == records[i].first &&
           it->value() == records[i].second;
    ++i;
  }
  CKPTDB_RETURN_IF_ERROR(FromRocks(it->status(), what));
  if (same && i == records.size()) return Status::OK();
  return Status::Corruption("the records of checkpoint " +
                            std::to_string(checkpoint_id) + " in '" + path_ +
                            "' read back different from what was written");
}

Status StoreImpl::DeleteRecord(int64_t checkpoint_id) {
  const std::string what =
      "deleting the records of checkpoint " + std::to_string(checkpoint_id);
  const std::string end = MetaRangeEnd(checkpoint_id);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions read;
  read.iterate_upper_bound = &upper;
  rocksdb::WriteBatch batch;
  {
    // Point deletions of what is there: the main record and its tensors'.
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, meta_));
    for (it->Seek(MetaKey(checkpoint_id)); it->Valid(); it->Next())
      batch.Delete(meta_, it->key());
    const Status scanned = FromRocks(it->status(), what);
    if (!scanned.ok()) {
      // Damaged records: their keys are in the copy.
      Result<CopyEntries> copy =
          ReadCopy(*fs_, path_, CopyKind::kRecords, checkpoint_id);
      if (!copy.ok()) return scanned;
      for (const auto& [key, value] : *copy) batch.Delete(meta_, key);
    }
  }
  // A record already gone still gets its tombstone: the deletion is durable.
  if (batch.Count() == 0) batch.Delete(meta_, MetaKey(checkpoint_id));
  // The copy first: a copy without a record is left only by a deletion cut
  // short, which the journal names.
  CKPTDB_RETURN_IF_ERROR(RemoveCopy(CopyKind::kRecords, checkpoint_id));
  const Status s = WriteMeta(&batch, what);
  if (s.ok()) {
    memo_.Removed(checkpoint_id);
  } else {
    memo_.ForgetAll();  // the tombstones may have been written
  }
  return s;
}

Status StoreImpl::GetRecord(int64_t checkpoint_id,
                            rocksdb::PinnableSlice* record,
                            const rocksdb::ReadOptions& read) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  rocksdb::Status s = db_->Get(read, meta_, MetaKey(checkpoint_id), record);
  // A record the column family cannot give is read from its copy.
  if ((s.IsNotFound() || s.IsCorruption() || IsMissingTableFile(s)) &&
      MainRecordFromCopy(checkpoint_id, record).ok())
    s = rocksdb::Status::OK();
  if (s.IsNotFound() || (s.ok() && !catalogue_.Visible(checkpoint_id))) {
    return Status::NotFound("no checkpoint with id " +
                            std::to_string(checkpoint_id) + " in store '" +
                            path_ + "'");
  }
  return FromRocks(s, "reading checkpoint " + std::to_string(checkpoint_id));
}

Result<CheckpointMetadata> StoreImpl::GetMetadata(int64_t checkpoint_id) {
  return ReadMetadata(checkpoint_id, nullptr);
}

Result<CheckpointMetadata> StoreImpl::GetMetadata(
    int64_t checkpoint_id, const std::vector<std::string_view>& tensor_keys) {
  return ReadMetadata(checkpoint_id, &tensor_keys);
}

Result<CheckpointMetadata> StoreImpl::GetTensorMetadata(int64_t checkpoint_id,
                                                        std::string_view key) {
  {
    std::shared_lock lock(mu_);
    CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
    Result<CheckpointMetadata> meta =
        TensorFromDecodedRecord(checkpoint_id, key);
    if (meta.ok()) return meta;
  }
  // A damaged or missing record, a checkpoint deleted meanwhile: the reads
  // that read through the copies and name what is wrong.
  const std::vector<std::string_view> keys = {key};
  return ReadMetadata(checkpoint_id, &keys);
}

Result<CheckpointMetadata> StoreImpl::TensorFromDecodedRecord(
    int64_t checkpoint_id, std::string_view key) {
  CKPTDB_ASSIGN_OR_RETURN(std::shared_ptr<const MainRecord> main,
                          DecodedRecord(checkpoint_id));
  CheckpointMetadata out;
  out.info = main->meta.info;
  const std::string wanted(key);
  auto tensor = main->meta.tensors.find(wanted);
  if (tensor == main->meta.tensors.end()) {
    auto value = main->meta.values.find(wanted);
    if (value != main->meta.values.end()) out.values.insert(*value);
    return out;
  }
  TensorMetadata found = tensor->second;
  // Format 1 and the small tensors have their chunks in the decoded records.
  if (!main->has_chunks() && main->chunk_counts.contains(wanted)) {
    rocksdb::PinnableSlice record;
    const rocksdb::Status s =
        db_->Get(rocksdb::ReadOptions(), meta_,
                 TensorRecordKey(checkpoint_id, wanted), &record);
    CKPTDB_RETURN_IF_ERROR(FromRocks(s, "reading the record of tensor '" +
                                            wanted + "' of checkpoint " +
                                            std::to_string(checkpoint_id)));
    CKPTDB_ASSIGN_OR_RETURN(
        found.chunks,
        DecodeTensorRecord(*main, *tensor,
                           std::string_view(record.data(), record.size())));
  }
  out.tensors.emplace(wanted, std::move(found));
  return out;
}

Result<std::shared_ptr<const MainRecord>> StoreImpl::DecodedRecord(
    int64_t checkpoint_id) {
  uint64_t changes = 0;
  if (auto kept = memo_.Decoded(checkpoint_id, &changes)) return kept;
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read;
  read.snapshot = snapshot.snapshot();
  size_t record_bytes = 0;
  CKPTDB_ASSIGN_OR_RETURN(
      MainRecord main,
      ReadMainRecord(checkpoint_id, read, /*paths=*/false, &record_bytes));
  CKPTDB_RETURN_IF_ERROR(ReadSmallTensors(read, nullptr, &main));
  auto decoded = std::make_shared<const MainRecord>(std::move(main));
  memo_.RememberDecoded(decoded, record_bytes, changes);
  return decoded;
}

Result<MainRecord> StoreImpl::ReadMainRecord(int64_t checkpoint_id,
                                             const rocksdb::ReadOptions& read,
                                             bool paths, size_t* record_bytes) {
  rocksdb::PinnableSlice record;
  CKPTDB_RETURN_IF_ERROR(GetRecord(checkpoint_id, &record, read));
  if (record_bytes != nullptr) *record_bytes = record.size();
  CKPTDB_ASSIGN_OR_RETURN(
      MainRecord main,
      DecodeMainRecord(std::string_view(record.data(), record.size()), paths));
  if (main.meta.info.id != checkpoint_id) {
    return Status::Corruption("checkpoint record at id " +
                              std::to_string(checkpoint_id) + " claims id " +
                              std::to_string(main.meta.info.id));
  }
  return main;
}

Result<CheckpointMetadata> StoreImpl::ReadMetadata(
    int64_t checkpoint_id, const std::vector<std::string_view>* tensor_keys) {
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  Result<CheckpointMetadata> meta =
      ReadRocksMetadata(checkpoint_id, tensor_keys);
  if (!meta.status().IsCorruption()) return meta;
  // Damaged records are read from their copy; when it is damaged too, both
  // errors tell.
  Result<CheckpointMetadata> copy =
      MetadataFromCopy(checkpoint_id, tensor_keys);
  if (copy.ok()) return copy;
  return Status::Corruption(meta.status().message() +
                            (copy.status().IsNotFound()
                                 ? std::string("; it has no copy")
                                 : "; its copy: " + copy.status().message()));
}

Result<CheckpointMetadata> StoreImpl::ReadRocksMetadata(
    int64_t checkpoint_id, const std::vector<std::string_view>* tensor_keys) {
  const std::string context = "checkpoint id " + std::to_string(checkpoint_id);
  // One view of the records, whatever commits or deletes meanwhile.
  rocksdb::ManagedSnapshot snapshot(db_.get());
  rocksdb::ReadOptions read;
  read.snapshot = snapshot.snapshot();
  // A load (named tensors) matches its leaves by flat key: no paths.
  Result<MainRecord> main =
      ReadMainRecord(checkpoint_id, read, /*paths=*/tensor_keys == nullptr);
  if (!main.ok()) return main.status().WithContext(context);
  std::optional<std::vector<std::string_view>> wanted;
  if (tensor_keys) wanted = SortedOnce(*tensor_keys);
  Status s = wanted ? ReadTensorRecords(read, *wanted, &*main)
                    : ReadAllTensorRecords(read, &*main);
  if (s.ok()) s = ReadSmallTensors(read, wanted ? &*wanted : nullptr, &*main);
  if (!s.ok()) return s.WithContext(context);
  return std::move(main->meta);
}

Status StoreImpl::ReadSmallTensors(const rocksdb::ReadOptions& read,
                                   const std::vector<std::string_view>* wanted,
                                   MainRecord* main) {
  // A load of none of them does not read their record.
  if (main->small_counts.empty() ||
      (wanted != nullptr && !AsksForSmallTensors(*main, *wanted)))
    return Status::OK();
  const int64_t id = main->meta.info.id;
  rocksdb::PinnableSlice record;
  const rocksdb::Status got =
      db_->Get(read, meta_, SmallTensorsKey(id), &record);
  if (got.IsNotFound()) {
    return Status::Corruption(
        "checkpoint metadata: the small tensors' record is missing: the "
        "chunks of " +
        std::to_string(main->small_counts.size()) + " tensors");
  }
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      got,
      "reading the small tensors' record of checkpoint " + std::to_string(id)));
  return DecodeSmallTensors(
      main, std::string_view(record.data(), record.size()), wanted);
}

Status StoreImpl::ReadAllTensorRecords(const rocksdb::ReadOptions& read,
                                       MainRecord* main) {
  if (main->has_chunks()) return Status::OK();
  const int64_t id = main->meta.info.id;
  TensorRecords it(*db_, meta_, read, id);
  bool first = true;
  auto next = [&](std::string_view* key, std::string_view* bytes) {
    if (!first) it->Next();
    first = false;
    int64_t record_id = 0;
    if (!it->Valid() ||
        !DecodeTensorRecordKey(
            std::string_view(it->key().data(), it->key().size()), &record_id,
            key))
      return false;
    *bytes = std::string_view(it->value().data(), it->value().size());
    return true;
  };
  Status decoded = DecodeAllTensorRecords(main, next);
  // A read error ends the walk early: it, not a missing record, is the cause.
  CKPTDB_RETURN_IF_ERROR(FromRocks(it->status(),
                                   "reading the tensor records of "
                                   "checkpoint " +
                                       std::to_string(id)));
  return decoded;
}

Status StoreImpl::ReadTensorRecords(const rocksdb::ReadOptions& read,
                                    const std::vector<std::string_view>& wanted,
                                    MainRecord* main) {
  auto is_wanted = [&](std::string_view key) {
    return std::binary_search(wanted.begin(), wanted.end(), key);
  };
  // No tensor has a record of its own (all are in the small tensors'
  // record): nothing to read.
  if (!main->has_chunks() && main->chunk_counts.empty()) return Status::OK();
  const int64_t id = main->meta.info.id;
  // A quarter of the tensors or more: one walk of the records (each point
  // read costs a seek through the tables; 10,000 of them took most of a
  // load of 10,000 small tensors).
  if (!main->has_chunks() && 4 * wanted.size() >= main->meta.tensors.size())
    return WalkTensorRecords(read, wanted, main);
  for (auto& [key, tensor] : main->meta.tensors) {
    if (main->has_chunks()) {
      if (!is_wanted(key)) tensor.chunks.clear();
      continue;
    }
    // Small tensors have theirs from the small tensors' record (format 4).
    if (!is_wanted(key) || !main->chunk_counts.contains(key)) continue;
    rocksdb::PinnableSlice record;
    rocksdb::Status s =
        db_->Get(read, meta_, TensorRecordKey(id, key), &record);
    if (s.IsNotFound()) {
      return Status::Corruption("checkpoint metadata: tensor '" + key +
                                "' has no record: its chunks are missing");
    }
    CKPTDB_RETURN_IF_ERROR(FromRocks(s, "reading the record of tensor '" + key +
                                            "' of checkpoint " +
                                            std::to_string(id)));
    CKPTDB_ASSIGN_OR_RETURN(
        tensor.chunks,
        DecodeTensorRecord(*main, key,
                           std::string_view(record.data(), record.size())));
  }
  return Status::OK();
}

// The records of the `wanted` tensors, decoded in one walk of the
// checkpoint's records; the others' are passed over undecoded. Records come in
// key order (the bytewise order of their tensor keys), as `wanted` and the
// tensors are: one merge of the three, no lookup per record.
Status StoreImpl::WalkTensorRecords(const rocksdb::ReadOptions& read,
                                    const std::vector<std::string_view>& wanted,
                                    MainRecord* main) {
  const int64_t id = main->meta.info.id;
  auto& tensors = main->meta.tensors;
  // The wanted tensors that have records (the small tensors' chunks come
  // from the small tensors' record), in key order.
  std::vector<std::map<std::string, TensorMetadata>::iterator> targets;
  {
    auto tensor = tensors.begin();
    auto counted = main->chunk_counts.begin();
    for (const std::string_view key : wanted) {
      while (tensor != tensors.end() && std::string_view(tensor->first) < key)
        ++tensor;
      while (counted != main->chunk_counts.end() &&
             std::string_view(counted->first) < key)
        ++counted;
      if (tensor != tensors.end() && tensor->first == key &&
          counted != main->chunk_counts.end() && counted->first == key)
        targets.push_back(tensor);
    }
  }
  auto missing = [&](size_t t) {
    return Status::Corruption("checkpoint metadata: tensor '" +
                              targets[t]->first +
                              "' has no record: its chunks are missing");
  };
  size_t next = 0;  // the first target whose record has not come yet
  TensorRecords it(*db_, meta_, read, id);
  for (; it->Valid() && next < targets.size(); it->Next()) {
    int64_t record_id = 0;
    std::string_view key;
    if (!DecodeTensorRecordKey(
            std::string_view(it->key().data(), it->key().size()), &record_id,
            &key))
      break;
    // A target before this record's key was passed by without its record.
    if (std::string_view(targets[next]->first) < key) return missing(next);
    if (targets[next]->first != key) continue;
    auto& tensor = *targets[next++];
    CKPTDB_ASSIGN_OR_RETURN(
        tensor.second.chunks,
        DecodeTensorRecord(
            *main, tensor,
            std::string_view(it->value().data(), it->value().size())));
  }
  // A read error ends the walk early: it, not a missing record, is the cause.
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      it->status(),
      "reading the tensor records of checkpoint " + std::to_string(id)));
  if (next < targets.size()) return missing(next);
  return Status::OK();
}

}  // namespace ckptdb::storage
