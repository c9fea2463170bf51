#pragma once

// ckptdb's second copies of a store's metadata, beside RocksDB's files (the
// first copies), so that one damaged file of either never costs a checkpoint:
//   copies/<id>.rec  every record of checkpoint <id> (its main record and its
//                    tensor records, keys and values as in the `meta` column
//                    family);
//   copies/<id>.loc  where the chunks stored under checkpoint <id>'s keys lie:
//                    per chunk table file the properties that locate every
//                    value (chunk_files.h LocatorBlob), so that a chunk is
//                    found without its table file's index, footer or pointer.
// Each file is a list of (key, value) entries, compressed, with a checksum over
// it all, written to a temporary name, synced and renamed into place: a reader
// sees a whole copy or none. Chunk bytes are never copied: they are the bulk,
// and each chunk has its own checksum.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptdb/status.h"
#include "storage/file_system.h"

struct ZSTD_CCtx_s;

namespace ckptdb::storage {

using CopyEntries = std::vector<std::pair<std::string, std::string>>;

enum class CopyKind : char { kRecords = 'r', kLocators = 'l' };

// Pure codec: a magic, the kind, the length of the entries, the entries
// compressed (one zstd frame of the entry count and each entry as two
// length-prefixed strings), then the XXH3-64 of everything before it.
// Decoding checks the checksum first, then the kind, the frame and every
// length (Corruption otherwise); it also reads copies of uncompressed entries
// (magic CKPTCOPY, the kind, the entries, the checksum).
std::string EncodeCopy(CopyKind kind, const CopyEntries& entries);
Result<CopyEntries> DecodeCopy(CopyKind kind, std::string_view bytes);

// EncodeCopy for a caller that encodes copy after copy (a store, at each
// commit): the entries are compressed as they lie, never gathered into one
// buffer, and the compressor's working memory is kept from one copy to the
// next. Fresh memory costs a page fault a page the first time it is written,
// many times the compression of its bytes on a virtual machine. Thread-safe.
class CopyEncoder {
 public:
  CopyEncoder();
  ~CopyEncoder();
  CopyEncoder(const CopyEncoder&) = delete;
  CopyEncoder& operator=(const CopyEncoder&) = delete;

  std::string Encode(CopyKind kind, const CopyEntries& entries);

 private:
  std::mutex mu_;
  ZSTD_CCtx_s* context_;            // kept for the next copy
  std::unique_ptr<char[]> staged_;  // the compressor's output, staged
  size_t staged_bytes_ = 0;
};

// <store>/copies, and the copy files in it.
std::string CopiesDir(const std::string& store_path);
std::string CopyPath(const std::string& store_path, CopyKind kind,
                     int64_t checkpoint_id);
// <store>/damaged: where a rebuild of the database keeps the files it
// replaces (one numbered directory per rebuild).
std::string DamagedDir(const std::string& store_path);
// A new, empty numbered directory under DamagedDir, for the files one repair
// replaces.
Result<std::string> NewDamagedDir(StoreFileSystem& fs,
                                  const std::string& store_path);
// The checkpoint id and kind a name in CopiesDir stands for; false for any
// other name (temporary files included).
bool ParseCopyName(std::string_view name, int64_t* checkpoint_id,
                   CopyKind* kind);

// Writes one copy file durably (temporary name, sync, rename, directory sync).
Status WriteCopy(StoreFileSystem& fs, const std::string& store_path,
                 CopyKind kind, int64_t checkpoint_id,
                 const CopyEntries& entries);
// The same, for a copy already encoded (EncodeCopy(kind, entries)).
Status WriteEncodedCopy(StoreFileSystem& fs, const std::string& store_path,
                        CopyKind kind, int64_t checkpoint_id,
                        const std::string& encoded);
// NotFound when the copy is absent; Corruption naming its path when it is
// damaged.
Result<CopyEntries> ReadCopy(StoreFileSystem& fs, const std::string& store_path,
                             CopyKind kind, int64_t checkpoint_id);

}  // namespace ckptdb::storage
