#include "storage/record_copies.h"

#include <zstd.h>

#include <algorithm>
#include <charconv>

#include "core/checksum.h"
#include "core/little_endian.h"

namespace ckptdb::storage {
namespace {

// Copies are written compressed (kCompressedMagic); those of uncompressed
// entries (kMagic) are still read.
constexpr char kMagic[] = "CKPTCOPY";
constexpr char kCompressedMagic[] = "CKPTCOPZ";
constexpr size_t kMagicBytes = 8;
// Records are mostly Cap'n Proto's zero padding and small integers: zstd's
// fastest level keeps about a fifth of their bytes, at several hundred MB/s.
constexpr int kZstdLevel = 1;
// The most entry bytes a copy may claim (a checkpoint of 10^9 chunks' records
// is well below).
constexpr uint64_t kMaxEntriesBytes = uint64_t{1} << 40;

// The entry count, then each entry as two length-prefixed strings.
Result<CopyEntries> DecodeEntries(std::string_view rest) {
  if (rest.size() < 4) return Status::Corruption("an entry is cut short");
  const uint64_t count = GetLittleEndian<uint32_t>(rest.data());
  rest.remove_prefix(4);
  CopyEntries entries;
  for (uint64_t i = 0; i < count; ++i) {
    std::string parts[2];
    for (std::string& part : parts) {
      if (rest.size() < 4) return Status::Corruption("an entry is cut short");
      const uint64_t n = GetLittleEndian<uint32_t>(rest.data());
      if (rest.size() - 4 < n)
        return Status::Corruption("an entry is cut short");
      part.assign(rest.substr(4, n));
      rest.remove_prefix(4 + n);
    }
    entries.emplace_back(std::move(parts[0]), std::move(parts[1]));
  }
  if (!rest.empty()) return Status::Corruption("bytes after the last entry");
  return entries;
}

const char* Suffix(CopyKind kind) {
  return kind == CopyKind::kRecords ? ".rec" : ".loc";
}

}  // namespace

std::string EncodeCopy(CopyKind kind, const CopyEntries& entries) {
  return CopyEncoder().Encode(kind, entries);
}

CopyEncoder::CopyEncoder()
    : context_(ZSTD_createCCtx()), staged_bytes_(ZSTD_CStreamOutSize()) {
  CKPTDB_ASSERT(context_ != nullptr, "creating a zstd compression context");
  staged_ = std::make_unique<char[]>(staged_bytes_);
  const size_t set =
      ZSTD_CCtx_setParameter(context_, ZSTD_c_compressionLevel, kZstdLevel);
  CKPTDB_ASSERT(!ZSTD_isError(set),
                std::string("setting zstd's level: ") + ZSTD_getErrorName(set));
}

CopyEncoder::~CopyEncoder() { ZSTD_freeCCtx(context_); }

std::string CopyEncoder::Encode(CopyKind kind, const CopyEntries& entries) {
  std::lock_guard lock(mu_);
  // The entries' bytes: the count, then each key and value after its length.
  uint64_t body = 4;
  for (const auto& [key, value] : entries)
    body += 8 + key.size() + value.size();
  std::string out(kCompressedMagic, kMagicBytes);
  out.push_back(static_cast<char>(kind));
  PutLittleEndian<uint64_t>(&out, body);
  // Room for the worst case: only what the frame fills is ever touched.
  out.reserve(out.size() + ZSTD_compressBound(body) + 8);
  auto check = [](size_t result) {
    CKPTDB_ASSERT(!ZSTD_isError(result),
                  std::string("compressing a metadata copy: ") +
                      ZSTD_getErrorName(result));
    return result;
  };
  check(ZSTD_CCtx_reset(context_, ZSTD_reset_session_only));
  // The frame records the entries' size, which decoding checks.
  check(ZSTD_CCtx_setPledgedSrcSize(context_, body));
  auto feed = [&](const void* data, size_t size, ZSTD_EndDirective mode) {
    ZSTD_inBuffer in{data, size, 0};
    while (true) {
      ZSTD_outBuffer staged{staged_.get(), staged_bytes_, 0};
      const size_t left =
          check(ZSTD_compressStream2(context_, &staged, &in, mode));
      out.append(staged_.get(), staged.pos);
      const bool done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
      if (done) return;
    }
  };
  auto length = [&](size_t n) {
    std::string bytes;
    PutLittleEndian(&bytes, static_cast<uint32_t>(n));
    feed(bytes.data(), bytes.size(), ZSTD_e_continue);
  };
  length(entries.size());
  for (const auto& [key, value] : entries) {
    length(key.size());
    feed(key.data(), key.size(), ZSTD_e_continue);
    length(value.size());
    feed(value.data(), value.size(), ZSTD_e_continue);
  }
  feed(nullptr, 0, ZSTD_e_end);
  PutLittleEndian<uint64_t>(&out, ChunkChecksum(out.data(), out.size()));
  return out;
}

Result<CopyEntries> DecodeCopy(CopyKind kind, std::string_view bytes) {
  if (bytes.size() < kMagicBytes + 1 + 8)
    return Status::Corruption("not a copy file (no header)");
  const std::string_view magic = bytes.substr(0, kMagicBytes);
  const bool compressed =
      magic == std::string_view(kCompressedMagic, kMagicBytes);
  if (!compressed && magic != std::string_view(kMagic, kMagicBytes))
    return Status::Corruption("not a copy file (no header)");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  if (GetLittleEndian<uint64_t>(bytes.data() + body.size()) !=
      ChunkChecksum(body.data(), body.size()))
    return Status::Corruption("checksum mismatch");
  if (bytes[kMagicBytes] != static_cast<char>(kind))
    return Status::Corruption("a copy of another kind");
  if (!compressed) return DecodeEntries(body.substr(kMagicBytes + 1));
  if (body.size() < kMagicBytes + 1 + 8)
    return Status::Corruption("not a copy file (no header)");
  const uint64_t size =
      GetLittleEndian<uint64_t>(body.data() + kMagicBytes + 1);
  const std::string_view frame = body.substr(kMagicBytes + 1 + 8);
  if (size > kMaxEntriesBytes ||
      ZSTD_getFrameContentSize(frame.data(), frame.size()) != size)
    return Status::Corruption("its compressed entries are not " +
                              std::to_string(size) + " bytes");
  std::string entries(size, '\0');
  const size_t got = ZSTD_decompress(entries.data(), entries.size(),
                                     frame.data(), frame.size());
  if (ZSTD_isError(got) || got != size)
    return Status::Corruption("its compressed entries do not decompress");
  return DecodeEntries(entries);
}

std::string CopiesDir(const std::string& store_path) {
  return store_path + "/copies";
}

std::string CopyPath(const std::string& store_path, CopyKind kind,
                     int64_t checkpoint_id) {
  return CopiesDir(store_path) + "/" + std::to_string(checkpoint_id) +
         Suffix(kind);
}

std::string DamagedDir(const std::string& store_path) {
  return store_path + "/damaged";
}

Result<std::string> NewDamagedDir(StoreFileSystem& fs,
                                  const std::string& store_path) {
  const std::string root = DamagedDir(store_path);
  CKPTDB_RETURN_IF_ERROR(fs.CreateDirIfMissing(root));
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> earlier,
                          fs.ListDir(root));
  // One past the highest number given out (a directory a user removed is
  // never reused with what is left beside it).
  uint64_t next = earlier.size() + 1;
  for (const std::string& name : earlier) {
    uint64_t n = 0;
    const auto [end, ec] =
        std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec == std::errc() && end == name.data() + name.size() && n < UINT32_MAX)
      next = std::max(next, n + 1);
  }
  const std::string aside = root + "/" + std::to_string(next);
  CKPTDB_RETURN_IF_ERROR(fs.CreateDirIfMissing(aside));
  return aside;
}

bool ParseCopyName(std::string_view name, int64_t* checkpoint_id,
                   CopyKind* kind) {
  for (CopyKind k : {CopyKind::kRecords, CopyKind::kLocators}) {
    const std::string_view suffix = Suffix(k);
    if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
    const std::string_view digits = name.substr(0, name.size() - suffix.size());
    if (digits.find_first_not_of("0123456789") != std::string_view::npos ||
        digits.size() > 18)
      return false;
    int64_t id = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (id <= 0) return false;
    *checkpoint_id = id;
    *kind = k;
    return true;
  }
  return false;
}

Status WriteCopy(StoreFileSystem& fs, const std::string& store_path,
                 CopyKind kind, int64_t checkpoint_id,
                 const CopyEntries& entries) {
  return WriteEncodedCopy(fs, store_path, kind, checkpoint_id,
                          EncodeCopy(kind, entries));
}

Status WriteEncodedCopy(StoreFileSystem& fs, const std::string& store_path,
                        CopyKind kind, int64_t checkpoint_id,
                        const std::string& encoded) {
  const std::string dir = CopiesDir(store_path);
  const std::string path = CopyPath(store_path, kind, checkpoint_id);
  const std::string what = "writing the metadata copy " + path;
  if (fs.FileExists(dir, rocksdb::IOOptions(), nullptr).IsNotFound()) {
    CKPTDB_RETURN_IF_ERROR(fs.CreateDirIfMissing(dir).WithContext(what));
    CKPTDB_RETURN_IF_ERROR(fs.SyncDir(store_path).WithContext(what));
  }
  const std::string tmp = path + ".tmp";
  CKPTDB_RETURN_IF_ERROR(fs.WriteFileSynced(tmp, encoded).WithContext(what));
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(fs.RenameFile(tmp, path, rocksdb::IOOptions(), nullptr), what));
  return fs.SyncDir(dir).WithContext(what);
}

Result<CopyEntries> ReadCopy(StoreFileSystem& fs, const std::string& store_path,
                             CopyKind kind, int64_t checkpoint_id) {
  const std::string path = CopyPath(store_path, kind, checkpoint_id);
  CKPTDB_ASSIGN_OR_RETURN(const std::string bytes, fs.ReadWholeFile(path));
  Result<CopyEntries> entries = DecodeCopy(kind, bytes);
  if (!entries.ok())
    return Status::Corruption("metadata copy " + path +
                              " is damaged: " + entries.status().message());
  return entries;
}

}  // namespace ckptdb::storage
