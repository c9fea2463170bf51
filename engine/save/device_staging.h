#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ckptdb/status.h"
#include "engine/device/device.h"
#include "engine/save/save_layout.h"

namespace ckptdb::engine {

// Host bytes of a part's chunks, in write order. Chunks of strided host
// views are packed into a buffer of one chunk. Device chunks come through two
// page-locked staging buffers (strided ones packed by 2-D copies): the copy
// of the next device chunk runs while the current one is written.
class DeviceChunks {
 public:
  DeviceChunks(const std::vector<MyChunk>& mine,
               const std::vector<size_t>& order, DeviceCopier* copier)
      : mine_(mine), order_(order), copier_(copier) {}
  DeviceChunks(const DeviceChunks&) = delete;
  DeviceChunks& operator=(const DeviceChunks&) = delete;
  // Copies in flight must finish before their buffers go.
  ~DeviceChunks();

  // The bytes of chunk `i` (an index into `order`); `end` bounds the part.
  Result<const char*> HostBytes(size_t i, size_t end);

 private:
  // The packed bytes of a host chunk of a strided view, or a dense one's.
  const char* HostChunk(const MyChunk& m);
  // Starts copying device chunk `i` into staging buffer i % 2.
  Status Start(size_t i);

  const std::vector<MyChunk>& mine_;
  const std::vector<size_t>& order_;
  DeviceCopier* const copier_;
  StagingBuffer staging_[2];
  const Device* pending_[2] = {nullptr, nullptr};
  size_t started_ = SIZE_MAX;  // the last chunk whose copy was started
  // The packed chunk of a strided host view.
  std::vector<char> packed_;
};

}  // namespace ckptdb::engine
