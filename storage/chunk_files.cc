#include "storage/chunk_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "core/checksum.h"
#include "core/little_endian.h"
#include "storage/value_files.h"

namespace ckptdb::storage {
namespace {

// The user property of a chunk table file that says where chunk values start
// (ValueOffsetCollector), little-endian: the file's first and last keys (each
// a 4-byte length and the bytes), then per chunk that starts a block the
// 8-byte hash of its key (KeyHash) and the 8-byte file offset of its value.
// 16 bytes per chunk of at least 64 KiB: RocksDB keeps the properties of every
// open table file in memory.
constexpr char kValueOffsetsProperty[] = "ckptdb.chunk-value-offsets";
// The user property of a table file whose chunks point into a value file
// (format 3): the file's name under the values directory, then its length as
// the pointers need it (8 bytes), then per chunk the 8-byte hash of its key
// and the 8-byte offset of its value in the value file.
constexpr char kValueFileProperty[] = "ckptdb.chunk-value-file";
// The user property of a chunk table file that says where every value kept in
// the table file starts, small chunks that share a block included: per value
// the 8-byte hash of its key and the 8-byte file offset of its value. Parsed
// for direct reads of small chunks too, and copied into the checkpoint's
// locator copy (record_copies.h), so that a chunk's bytes are found without
// the file's index or footer.
constexpr char kTableOffsetsProperty[] = "ckptdb.chunk-table-offsets";

uint64_t KeyHash(std::string_view key) {
  return ChunkChecksum(key.data(), key.size());
}

size_t VarintLength(uint64_t v) {
  size_t n = 1;
  while (v >= 128) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Records, while a chunk file is written, where each chunk's value lands, so
// that loads can read it straight into its target (StoreImpl::ReadDirect)
// instead of through RocksDB's block buffer. RocksDB reports every key with
// the file offset of the data block it joins. A key that starts a block (the
// first one, or the offset moved since the previous key: the previous block
// was written) has its value right after the entry header: the varints of the
// shared key length (0), the internal key length and the value length, then
// the internal key (user key + 8 bytes). Keys that share a block (small
// chunks) get no entry. A wrong offset costs nothing but speed: every direct
// read is checked against the chunk's checksum and falls back to Get.
class ValueOffsetCollector : public rocksdb::TablePropertiesCollector {
 public:
  explicit ValueOffsetCollector(std::shared_ptr<ValueFileLog> log)
      : log_(std::move(log)) {}

  rocksdb::Status AddUserKey(const rocksdb::Slice& key,
                             const rocksdb::Slice& value,
                             rocksdb::EntryType type, rocksdb::SequenceNumber,
                             uint64_t file_size) override {
    if (type != rocksdb::kEntryPut) return rocksdb::Status::OK();
    const bool starts_block = entries_ == 0 || file_size != last_block_;
    const uint64_t in_table = TrackEntry(key, value, starts_block, file_size);
    const uint64_t hash = KeyHash(key.ToStringView());
    // The writer says which values are pointers: a chunk's own bytes may look
    // like one.
    if (log_ && log_->next_is_pointer) {
      log_->next_is_pointer = false;
      PutLittleEndian<uint64_t>(&pointers_, hash);
      PutLittleEndian<uint64_t>(&pointers_, log_->next_offset);
    } else {
      PutLittleEndian<uint64_t>(&table_, hash);
      PutLittleEndian<uint64_t>(&table_, in_table);
      if (starts_block) {
        PutLittleEndian<uint64_t>(&offsets_, hash);
        PutLittleEndian<uint64_t>(&offsets_, in_table);
      }
    }
    if (entries_ == 0) first_ = key.ToString();
    last_.assign(key.data(), key.size());
    last_block_ = file_size;
    ++entries_;
    return rocksdb::Status::OK();
  }

  rocksdb::Status Finish(rocksdb::UserCollectedProperties* props) override {
    std::string out;
    for (const std::string* key : {&first_, &last_}) {
      PutLittleEndian<uint32_t>(&out, static_cast<uint32_t>(key->size()));
      out += *key;
    }
    (*props)[kValueOffsetsProperty] = out + offsets_;
    (*props)[kTableOffsetsProperty] = table_;
    if (!pointers_.empty()) {
      std::string file = log_->name;
      file.push_back('\0');
      PutLittleEndian<uint64_t>(&file, log_->end);
      (*props)[kValueFileProperty] = file + pointers_;
    }
    return rocksdb::Status::OK();
  }

  rocksdb::UserCollectedProperties GetReadableProperties() const override {
    return {};
  }
  const char* Name() const override { return "ckptdb.ValueOffsetCollector"; }

 private:
  // Where the value of the entry (key, value) lands in the file, as RocksDB's
  // block builder lays out a data block: each entry is the varints of the
  // key bytes it shares with the previous key in the block (none at the
  // block's start and at every kChunkBlockRestartInterval-th entry), of the
  // bytes it does not share and of the value's length, then those key bytes
  // and the value. Keys are internal keys: the user key and 8 bytes of
  // sequence number (0 in a staged file) and type.
  uint64_t TrackEntry(const rocksdb::Slice& key, const rocksdb::Slice& value,
                      bool starts_block, uint64_t block_offset) {
    std::string& internal = internal_;
    internal.assign(key.data(), key.size());
    internal.push_back('\x01');  // RocksDB's kTypeValue, sequence number 0
    internal.append(7, '\0');
    if (starts_block) {
      block_bytes_ = 0;
      block_entries_ = 0;
      previous_.clear();
    }
    size_t shared = 0;
    if (block_entries_ % kChunkBlockRestartInterval != 0) {
      const size_t n = std::min(previous_.size(), internal.size());
      while (shared < n && previous_[shared] == internal[shared]) ++shared;
    }
    const uint64_t header = VarintLength(shared) +
                            VarintLength(internal.size() - shared) +
                            VarintLength(value.size());
    const uint64_t at =
        block_offset + block_bytes_ + header + (internal.size() - shared);
    block_bytes_ += header + (internal.size() - shared) + value.size();
    ++block_entries_;
    previous_.swap(internal);
    return at;
  }

  std::string offsets_;
  // Every value kept in the table file: key hash, file offset.
  std::string table_;
  uint64_t block_bytes_ = 0;
  uint64_t block_entries_ = 0;
  // The previous entry's internal key, and the buffer of this one's.
  std::string previous_, internal_;
  // Set by a staged writer whose table file holds pointers.
  std::shared_ptr<ValueFileLog> log_;
  // The pointers' key hashes and offsets in the value file.
  std::string pointers_;
  std::string first_, last_;
  uint64_t last_block_ = 0;
  uint64_t entries_ = 0;
};

class ValueOffsetCollectorFactory
    : public rocksdb::TablePropertiesCollectorFactory {
 public:
  explicit ValueOffsetCollectorFactory(std::shared_ptr<ValueFileLog> log)
      : log_(std::move(log)) {}
  rocksdb::TablePropertiesCollector* CreateTablePropertiesCollector(
      rocksdb::TablePropertiesCollectorFactory::Context) override {
    return new ValueOffsetCollector(log_);
  }
  const char* Name() const override {
    return "ckptdb.ValueOffsetCollectorFactory";
  }

 private:
  std::shared_ptr<ValueFileLog> log_;
};

// Ends a data block at the block size, as RocksDB's default policy does, and
// also before every chunk of at least kOwnBlockBytes: such a chunk starts a
// block of its own, so its value's offset is known (ValueOffsetCollector) and
// loads read it directly. (By default a large value joins a block holding
// small ones whenever that block is under 90 % full.) Block sizes are tracked
// from the entries, as the builder's own estimate is not public.
class ChunkFlushBlockPolicy : public rocksdb::FlushBlockPolicy {
 public:
  explicit ChunkFlushBlockPolicy(size_t block_size) : block_size_(block_size) {}

  bool Update(const rocksdb::Slice& key, const rocksdb::Slice& value) override {
    const size_t entry = key.size() + value.size() + 24;  // + header, seqno
    const bool flush =
        bytes_ > 0 && (bytes_ >= block_size_ || value.size() >= kOwnBlockBytes);
    bytes_ = flush ? entry : bytes_ + entry;
    return flush;
  }

 private:
  const size_t block_size_;
  size_t bytes_ = 0;
};

class ChunkFlushBlockPolicyFactory : public rocksdb::FlushBlockPolicyFactory {
 public:
  const char* Name() const override { return "ckptdb.ChunkFlushBlockPolicy"; }
  rocksdb::FlushBlockPolicy* NewFlushBlockPolicy(
      const rocksdb::BlockBasedTableOptions& options,
      const rocksdb::BlockBuilder&) const override {
    return new ChunkFlushBlockPolicy(options.block_size);
  }
};

}  // namespace

FileOffsets::~FileOffsets() {
  if (fd >= 0) ::close(fd);
  if (value_fd >= 0) ::close(value_fd);
}

bool FileOffsets::Holds(std::string_view key) const {
  return first <= key && key <= last;
}

std::optional<FileOffsets::Location> FileOffsets::ValueOffset(
    std::string_view key) const {
  const uint64_t hash = KeyHash(key);
  if (std::optional<uint64_t> found = external.Find(hash))
    return Location{&value_path, value_fd, *found};
  if (std::optional<uint64_t> found = at.Find(hash))
    return Location{&path, fd, *found};
  return std::nullopt;
}

std::shared_ptr<rocksdb::FlushBlockPolicyFactory>
NewChunkFlushBlockPolicyFactory() {
  return std::make_shared<ChunkFlushBlockPolicyFactory>();
}

std::shared_ptr<rocksdb::TablePropertiesCollectorFactory>
NewValueOffsetCollectorFactory(std::shared_ptr<ValueFileLog> log) {
  return std::make_shared<ValueOffsetCollectorFactory>(std::move(log));
}

bool HasValueFile(const rocksdb::TableProperties& props) {
  return props.user_collected_properties.contains(kValueFileProperty);
}

std::optional<ValueFileExtent> ValueFileOf(
    const rocksdb::TableProperties& props) {
  auto found = props.user_collected_properties.find(kValueFileProperty);
  if (found == props.user_collected_properties.end()) return std::nullopt;
  const std::string_view bytes = found->second;
  const size_t nul = bytes.find('\0');
  if (nul == std::string_view::npos || bytes.size() < nul + 9)
    return std::nullopt;
  // <id>/<rank>-<part>-<nonce>.val (ValueFileName), nothing that leaves the
  // values directory: the store may come from anywhere.
  const std::string_view name = bytes.substr(0, nul);
  if (!name.ends_with(".val") || name.find("..") != std::string_view::npos ||
      name.find_first_not_of("0123456789abcdef/-.vl") !=
          std::string_view::npos ||
      std::count(name.begin(), name.end(), '/') != 1 || name.front() == '/')
    return std::nullopt;
  return ValueFileExtent{std::string(bytes.substr(0, nul)),
                         GetLittleEndian<uint64_t>(bytes.data() + nul + 1)};
}

void OffsetIndex::AddPairs(std::string_view bytes) {
  Reserve(size_ + bytes.size() / 16);
  for (; bytes.size() >= 16; bytes.remove_prefix(16)) {
    Insert(GetLittleEndian<uint64_t>(bytes.data()),
           GetLittleEndian<uint64_t>(bytes.data() + 8));
  }
}

void OffsetIndex::Reserve(size_t count) {
  size_t capacity = 16;
  while (capacity < 2 * count) capacity *= 2;
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(capacity));
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.offset != kEmpty) Insert(slot.hash, slot.offset);
  }
}

size_t OffsetIndex::Home(uint64_t hash, size_t mask) {
  // Mixed first: the hashes come from files, which may have been made to
  // collide in their low bits.
  return static_cast<size_t>((hash * 0x9E3779B97F4A7C15ull) >> 29) & mask;
}

void OffsetIndex::Insert(uint64_t hash, uint64_t offset) {
  if (offset == kEmpty) return;
  if (2 * (size_ + 1) > slots_.size()) Reserve(size_ + 1);
  const size_t mask = slots_.size() - 1;
  for (size_t i = Home(hash, mask);; i = (i + 1) & mask) {
    Slot& slot = slots_[i];
    if (slot.offset == kEmpty) {
      slot = Slot{hash, offset};
      ++size_;
      return;
    }
    if (slot.hash == hash) return;  // the first one stays
  }
}

std::optional<uint64_t> OffsetIndex::Find(uint64_t hash) const {
  if (slots_.empty()) return std::nullopt;
  const size_t mask = slots_.size() - 1;
  for (size_t i = Home(hash, mask);; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.offset == kEmpty) return std::nullopt;
    if (slot.hash == hash) return slot.offset;
  }
}

std::shared_ptr<const FileOffsets> ParseFileOffsets(
    const std::string& path, const rocksdb::TableProperties& props,
    const std::string& store_path,
    const std::function<int(const std::string&)>& open_for_read) {
  auto found = props.user_collected_properties.find(kValueOffsetsProperty);
  if (found == props.user_collected_properties.end()) return nullptr;
  auto file = std::make_shared<FileOffsets>();
  file->path = path;
  std::string_view bytes = found->second;
  for (std::string* key : {&file->first, &file->last}) {
    if (bytes.size() < 4) return nullptr;
    const uint32_t n = GetLittleEndian<uint32_t>(bytes.data());
    if (bytes.size() < 4 + size_t{n}) return nullptr;
    key->assign(bytes.substr(4, n));
    bytes.remove_prefix(4 + size_t{n});
  }
  // Every value kept in the table, small chunks sharing a block included, so
  // that a load of many small chunks reads each straight into its target
  // (RocksDB's block cache holds 8 MiB, fewer than a large state's small
  // chunks); files written before that property, the values starting a block.
  auto table = props.user_collected_properties.find(kTableOffsetsProperty);
  file->at.AddPairs(table != props.user_collected_properties.end()
                        ? std::string_view(table->second)
                        : bytes);
  if (auto values = ValueFileOf(props)) {
    const std::string& all =
        props.user_collected_properties.at(kValueFileProperty);
    file->external.AddPairs(
        std::string_view(all).substr(values->name.size() + 9));
    file->value_path = ValuesDir(store_path) + "/" + values->name;
  }
  // A file of small chunks only is kept too: its range answers "not direct"
  // without asking RocksDB again.
  if (!file->at.empty()) {
    file->fd = open_for_read(path);
    if (file->fd < 0) return nullptr;
  }
  if (!file->external.empty()) {
    file->value_fd = open_for_read(file->value_path);
    if (file->value_fd < 0) return nullptr;
  }
  return file;
}

namespace {

// Takes a 4-byte length and that many bytes off the front of `bytes`.
bool TakePart(std::string_view* bytes, std::string_view* part) {
  if (bytes->size() < 4) return false;
  const uint32_t n = GetLittleEndian<uint32_t>(bytes->data());
  if (bytes->size() - 4 < n) return false;
  *part = bytes->substr(4, n);
  bytes->remove_prefix(4 + size_t{n});
  return true;
}

void PutPart(std::string* out, std::string_view part) {
  PutLittleEndian<uint32_t>(out, static_cast<uint32_t>(part.size()));
  out->append(part);
}

}  // namespace

std::optional<std::pair<bool, uint64_t>> ChunkLocations::Find(
    std::string_view key) const {
  const uint64_t hash = KeyHash(key);
  if (std::optional<uint64_t> found = in_value_file.Find(hash))
    return std::pair(true, *found);
  if (std::optional<uint64_t> found = in_table.Find(hash))
    return std::pair(false, *found);
  return std::nullopt;
}

std::optional<std::string> LocatorBlob(const rocksdb::TableProperties& props) {
  const auto& user = props.user_collected_properties;
  auto offsets = user.find(kValueOffsetsProperty);
  auto table = user.find(kTableOffsetsProperty);
  if (offsets == user.end() || table == user.end()) return std::nullopt;
  auto values = user.find(kValueFileProperty);
  std::string out;
  PutPart(&out, offsets->second);
  PutPart(&out, values == user.end() ? std::string() : values->second);
  PutPart(&out, table->second);
  return out;
}

std::optional<ChunkLocations> ParseLocatorBlob(std::string_view blob) {
  std::string_view offsets, values, table;
  if (!TakePart(&blob, &offsets) || !TakePart(&blob, &values) ||
      !TakePart(&blob, &table) || !blob.empty())
    return std::nullopt;
  ChunkLocations out;
  for (std::string* key : {&out.first, &out.last}) {
    std::string_view part;
    if (!TakePart(&offsets, &part)) return std::nullopt;
    key->assign(part);
  }
  out.in_table.AddPairs(table);
  if (!values.empty()) {
    rocksdb::TableProperties props;
    props.user_collected_properties[kValueFileProperty] = std::string(values);
    const std::optional<ValueFileExtent> file = ValueFileOf(props);
    if (!file) return std::nullopt;
    out.value_file = file->name;
    out.in_value_file.AddPairs(values.substr(file->name.size() + 9));
  }
  return out;
}

}  // namespace ckptdb::storage
