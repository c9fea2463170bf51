#pragma once

#include <rocksdb/file_checksum.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ckptdb::storage {

// CRC32C (Castagnoli) of `n` bytes, continuing `crc` (0 to start), computed
// with ISA-L at memory speed: Debian's RocksDB, built portable, computes it
// at about 1 GB/s.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// RocksDB's standard whole-file checksum of bytes whose CRC32C is `crc`:
// the four bytes, big-endian.
std::string WholeFileChecksum(uint32_t crc);

// The whole-file checksums RocksDB records in the MANIFEST for every table
// file it writes or ingests: RocksDB's standard function
// (kStandardDbFileChecksumFuncName, the same values, so that files written by
// either are checked by either), computed by Crc32c. It also takes the
// standard factory's name, which the OPTIONS file records: a store's OPTIONS
// file then reads back with RocksDB's own factory.
std::shared_ptr<rocksdb::FileChecksumGenFactory> NewWholeFileChecksumFactory();

}  // namespace ckptdb::storage
