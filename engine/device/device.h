#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"
#include "engine/copy/box_copy.h"

namespace ckptdb::engine {

// The seam between the save/load orchestration and device memory. Save and
// load never touch device memory themselves: they stage bytes in host buffers
// from StagingBuffer() and ask the copier to move them. A DB is given its
// copier at open (DeviceSeams): the CUDA copier (device_cuda.cc) when a device
// is present; in tests a stand-in that treats "device" memory as host memory,
// so that every device branch of save and load runs on machines without a GPU.
class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;

  // Host memory for staging (page-locked for CUDA). Never null.
  virtual void* AllocHost(size_t n) = 0;
  virtual void FreeHost(void* p) = 0;

  // Starts copying `n` contiguous device bytes at `src` into host `dst` on
  // the calling thread's queue `slot` (0 or 1); Wait(slot) completes it.
  // Copies on different slots may overlap each other and host work.
  virtual Status StartToHost(const Device& device, const void* src, void* dst,
                             size_t n, int slot) = 0;
  virtual Status Wait(const Device& device, int slot) = 0;

  // Starts packing the box `src` of a device array (possibly strided) of
  // `lengths` elements of `elem_size` bytes densely into host `dst`, on queue
  // `slot` like StartToHost; Wait(slot) completes it.
  virtual Status StartBoxToHost(const Device& device, StridedBox src, void* dst,
                                size_t elem_size, const Shape& lengths,
                                int slot) = 0;

  // Copies a box of `lengths` elements of `elem_size` bytes, packed densely
  // at host `src`, into the box of device array `dst` at its offset; returns
  // when `src` may be reused.
  virtual Status BoxToDevice(const Device& device, const void* src,
                             MutableStridedBox dst, size_t elem_size,
                             const Shape& lengths) = 0;

  // Like BoxToDevice, from a packed box at device address `src` (on the same
  // device); returns when done.
  virtual Status DeviceBoxToDevice(const Device& device, const void* src,
                                   MutableStridedBox dst, size_t elem_size,
                                   const Shape& lengths) = 0;

  // Device memory for transfers between ranks (DeviceTransport).
  virtual Result<void*> AllocDevice(const Device& device, size_t n) = 0;
  virtual void FreeDevice(const Device& device, void* p) = 0;

  // Waits until the work others queued on `device` (the producer of a
  // caller's tensor, such as a framework's stream) has finished, so that the
  // copier's own queues may read and write the caller's tensors there.
  virtual Status Synchronize(const Device& device) = 0;

  // The device a rank works on when none of its tensors names one (CUDA: the
  // calling thread's current device).
  virtual Result<Device> DefaultDevice() = 0;
};

// One 2-D copy into (or out of) an array: `rows` runs of `width` bytes,
// `pitch` bytes apart, the first at byte `offset`.
struct Copy2D {
  size_t offset, pitch, width, rows;
};

// The 2-D copies that fill the box [offset, offset + lengths) of an array of
// `shape` (dense row-major, or laid out by element `strides`) from a packed
// source, in source order: the source advances by width x rows per copy.
// Trailing dimensions contiguous in the array merge into one run (a strided
// innermost dimension: runs of one element), the next dimension gives the
// rows, and the dimensions before it are iterated. The same copies, reversed,
// pack the box.
// REQUIRES: the box is non-empty and lies inside the array.
std::vector<Copy2D> BoxAsCopies2D(const Shape& shape, const Shape& offset,
                                  const Shape& lengths, size_t elem_size,
                                  std::span<const int64_t> strides = {});

// The copier of this build: CUDA's (device_cuda.cc) when the build has CUDA
// and the machine a usable device, else nullptr (device tensors are then
// InvalidArgument). A DB uses the copier of its DeviceSeams.
DeviceCopier* BuiltDeviceCopier();

// Host staging memory from `copier`, freed on destruction.
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(DeviceCopier* copier, size_t n)
      : copier_(copier), data_(copier->AllocHost(n)), size_(n) {}
  StagingBuffer(StagingBuffer&& o) noexcept { *this = std::move(o); }
  StagingBuffer& operator=(StagingBuffer&& o) noexcept {
    std::swap(copier_, o.copier_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~StagingBuffer() {
    if (data_ != nullptr) copier_->FreeHost(data_);
  }
  char* data() const { return static_cast<char*>(data_); }
  size_t size() const { return size_; }
  // Grows to at least `n` bytes (contents not kept).
  void Reserve(DeviceCopier* copier, size_t n) {
    if (size_ < n) *this = StagingBuffer(copier, n);
  }

 private:
  DeviceCopier* copier_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Staging buffers shared by a load's threads: page-locked memory is slow to
// allocate, so each buffer is reused for the whole load. Thread-safe.
class StagingPool {
 public:
  StagingBuffer Take();
  void Give(StagingBuffer buffer);

 private:
  std::mutex mu_;
  std::vector<StagingBuffer> free_;
};

// Device memory from `copier`, freed on destruction; grows on demand and is
// reused across the rounds of a load (cudaMalloc is slow).
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceCopier* copier, Device device)
      : copier_(copier), device_(device) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) copier_->FreeDevice(device_, data_);
  }
  // Grows to at least `n` bytes (contents not kept).
  Status Reserve(size_t n);
  char* data() const { return static_cast<char*>(data_); }

 private:
  DeviceCopier* copier_;
  Device device_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Places a box of a host buffer into a target that may live on a device:
// host targets get CopyBox; device targets get the box packed (and converted
// to the target's dtype) into `staging`, then copied to the device by
// `copier` (nullptr: InvalidArgument).
Status PlaceBox(StridedBox src, DType src_dtype, const TensorView& target,
                const Shape& dest_offset, const Shape& lengths,
                DeviceCopier* copier, StagingBuffer* staging);

}  // namespace ckptdb::engine
