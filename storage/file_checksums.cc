#include "storage/file_checksums.h"

#include <isa-l/crc.h>

#include <climits>

namespace ckptdb::storage {

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  // ISA-L's crc32_iscsi takes and returns the register without the final
  // inversion, and an int length.
  uint32_t reg = ~crc;
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));
  while (n > 0) {
    const size_t piece = n < INT_MAX ? n : INT_MAX;
    reg = crc32_iscsi(bytes, static_cast<int>(piece), reg);
    bytes += piece;
    n -= piece;
  }
  return ~reg;
}

std::string WholeFileChecksum(uint32_t crc) {
  std::string sum;
  for (int shift = 24; shift >= 0; shift -= 8)
    sum.push_back(static_cast<char>((crc >> shift) & 0xFF));
  return sum;
}

namespace {

class WholeFileChecksumGenerator : public rocksdb::FileChecksumGenerator {
 public:
  void Update(const char* data, size_t n) override {
    crc_ = Crc32c(crc_, data, n);
  }
  void Finalize() override { checksum_ = WholeFileChecksum(crc_); }
  std::string GetChecksum() const override { return checksum_; }
  const char* Name() const override {
    return rocksdb::kStandardDbFileChecksumFuncName;
  }

 private:
  uint32_t crc_ = 0;
  std::string checksum_;
};

class WholeFileChecksumFactory : public rocksdb::FileChecksumGenFactory {
 public:
  std::unique_ptr<rocksdb::FileChecksumGenerator> CreateFileChecksumGenerator(
      const rocksdb::FileChecksumGenContext& context) override {
    // Asked for another function (an ingestion's files carrying their own):
    // none, as RocksDB's standard factory answers.
    if (!context.requested_checksum_func_name.empty() &&
        context.requested_checksum_func_name !=
            rocksdb::kStandardDbFileChecksumFuncName)
      return nullptr;
    return std::make_unique<WholeFileChecksumGenerator>();
  }
  static const char* kClassName() { return "FileChecksumGenCrc32cFactory"; }
  const char* Name() const override { return kClassName(); }
};

}  // namespace

std::shared_ptr<rocksdb::FileChecksumGenFactory> NewWholeFileChecksumFactory() {
  return std::make_shared<WholeFileChecksumFactory>();
}

}  // namespace ckptdb::storage
