#pragma once

// Writers of the files ckpt-db-dump exports: safetensors and numpy .npz.
// Tensors are produced one at a time by a callback, so that memory stays
// bounded by the largest tensor.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb::tools {

struct ExportTensor {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t nbytes;
};

// The bytes of tensor `index` (row-major, exactly its nbytes).
using TensorFiller =
    std::function<Result<std::vector<std::byte>>(size_t index)>;

// safetensors: an 8-byte little-endian header length, a JSON header (dtype,
// shape, data_offsets of each tensor, "__metadata__"), then the tensors'
// bytes in order. bfloat16 is "BF16", float8 "F8_E4M3" / "F8_E5M2".
Status WriteSafetensors(const std::string& path,
                        const std::vector<ExportTensor>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        const TensorFiller& fill);

// .npz: a zip of NAME.npy files (numpy format 1.0/2.0 headers), stored
// uncompressed. numpy has no bfloat16 or float8: they are written as uint16 /
// uint8 raw bits.
Status WriteNpz(const std::string& path,
                const std::vector<ExportTensor>& tensors,
                const TensorFiller& fill);

// The .npy header (magic, version, header dict padded to 64 bytes) of an array.
std::string NpyHeader(DType dtype, const Shape& shape);

}  // namespace ckptdb::tools
