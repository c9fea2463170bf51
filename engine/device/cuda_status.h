#pragma once

// CUDA runtime errors as Statuses (CUDA builds only).
#include <cuda_runtime_api.h>

#include <string>

#include "ckptdb/status.h"

namespace ckptdb::engine {

inline Status FromCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::OK();
  return Status::IOError(std::string("CUDA ") + what + ": " +
                         cudaGetErrorString(e));
}

}  // namespace ckptdb::engine
