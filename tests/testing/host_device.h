#pragma once

// Stand-ins for a GPU and for NCCL: "device" memory is host memory, every
// copy goes through the same 2-D copy decomposition the CUDA copier uses, and
// device-to-device transfers go over the host Communicator. Given to a DB as
// its device seams (HostSeams, OpenWithDevices), they let the device branches
// of save and load run on machines without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ckptdb/db.h"
#include "engine/api/db_impl.h"
#include "engine/device/device.h"
#include "engine/device/device_seams.h"
#include "engine/device/device_transport.h"

namespace ckptdb::testing {

class HostAsDevice : public engine::DeviceCopier {
 public:
  void* AllocHost(size_t n) override { return std::malloc(n == 0 ? 1 : n); }
  void FreeHost(void* p) override { std::free(p); }

  Status StartToHost(const Device& device, const void* src, void* dst, size_t n,
                     int slot) override {
    if (device.type != DeviceType::kCUDA || slot < 0 || slot > 1)
      return Status::Internal("bad device copy");
    std::memcpy(dst, src, n);
    to_host_bytes += n;
    return Status::OK();
  }
  Status StartBoxToHost(const Device& device, engine::StridedBox src, void* dst,
                        size_t elem_size, const Shape& lengths,
                        int slot) override {
    if (device.type != DeviceType::kCUDA || slot < 0 || slot > 1)
      return Status::Internal("bad device copy");
    if (NumElements(lengths) == 0) return Status::OK();
    char* to = static_cast<char*>(dst);
    for (const engine::Copy2D& c : engine::BoxAsCopies2D(
             src.buffer_shape, src.origin, lengths, elem_size, src.strides)) {
      for (size_t r = 0; r < c.rows; ++r) {
        std::memcpy(to,
                    static_cast<const char*>(src.data) + c.offset + r * c.pitch,
                    c.width);
        to += c.width;
      }
      ++copies_2d;
    }
    to_host_bytes += static_cast<uint64_t>(to - static_cast<char*>(dst));
    return Status::OK();
  }
  Status Wait(const Device&, int) override { return Status::OK(); }

  Status BoxToDevice(const Device& device, const void* src,
                     engine::MutableStridedBox dst, size_t elem_size,
                     const Shape& lengths) override {
    return CopyPacked(device, src, dst, elem_size, lengths, to_device_bytes);
  }

  Status DeviceBoxToDevice(const Device& device, const void* src,
                           engine::MutableStridedBox dst, size_t elem_size,
                           const Shape& lengths) override {
    return CopyPacked(device, src, dst, elem_size, lengths,
                      within_device_bytes);
  }

  Result<void*> AllocDevice(const Device& device, size_t n) override {
    if (device.type != DeviceType::kCUDA)
      return Status::Internal("bad device allocation");
    return std::malloc(n == 0 ? 1 : n);
  }
  void FreeDevice(const Device&, void* p) override { std::free(p); }

  Result<Device> DefaultDevice() override {
    return Device{DeviceType::kCUDA, 0};
  }

  Status Synchronize(const Device& device) override {
    if (device.type != DeviceType::kCUDA)
      return Status::Internal("bad device synchronize");
    ++synchronized;
    if (fail_synchronize) return Status::Internal("device lost (test)");
    return Status::OK();
  }

  std::atomic<uint64_t> to_host_bytes{0}, to_device_bytes{0}, copies_2d{0},
      within_device_bytes{0};
  // Synchronize calls; whether they fail.
  std::atomic<uint64_t> synchronized{0};
  std::atomic<bool> fail_synchronize{false};

 private:
  // A packed box into a "device" array through the 2-D copies, counted in
  // `bytes`.
  Status CopyPacked(const Device& device, const void* src,
                    engine::MutableStridedBox dst, size_t elem_size,
                    const Shape& lengths, std::atomic<uint64_t>& bytes) {
    if (device.type != DeviceType::kCUDA)
      return Status::Internal("bad device copy");
    const char* from = static_cast<const char*>(src);
    for (const engine::Copy2D& c : engine::BoxAsCopies2D(
             dst.buffer_shape, dst.origin, lengths, elem_size, dst.strides)) {
      for (size_t r = 0; r < c.rows; ++r) {
        std::memcpy(static_cast<char*>(dst.data) + c.offset + r * c.pitch, from,
                    c.width);
        from += c.width;
      }
      ++copies_2d;
    }
    bytes += static_cast<uint64_t>(from - static_cast<const char*>(src));
    return Status::OK();
  }
};

// Makes DeviceTransports over each rank's host Communicator (Factory),
// counting what they move. `fail_rank` >= 0 makes that rank's creation fail.
class HostTransports {
 public:
  explicit HostTransports(int fail_rank = -1) : fail_rank_(fail_rank) {}

  engine::DeviceTransportFactory Factory() {
    return [this](Communicator& comm, const Device& device)
               -> Result<std::unique_ptr<engine::DeviceTransport>> {
      if (comm.rank() == fail_rank_)
        return Status::FailedPrecondition("no transport on this rank");
      ++created;
      return std::unique_ptr<engine::DeviceTransport>(
          new Transport(comm, device, this));
    };
  }

  std::atomic<uint64_t> created{0}, runs{0}, sends{0}, broadcasts{0},
      bytes_sent{0};

 private:
  class Transport : public engine::DeviceTransport {
   public:
    Transport(Communicator& comm, Device device, HostTransports* counts)
        : comm_(comm), device_(device), counts_(counts) {}
    const Device& device() const override { return device_; }
    Status Run(std::span<const SendBuffer> sends,
               std::span<const RecvBuffer> recvs,
               std::span<const engine::DeviceBroadcast> broadcasts) override {
      ++counts_->runs;
      for (const SendBuffer& s : sends) {
        ++counts_->sends;
        counts_->bytes_sent += s.nbytes;
      }
      CKPTDB_RETURN_IF_ERROR(comm_.Exchange(sends, recvs));
      for (const engine::DeviceBroadcast& b : broadcasts) {
        std::string bytes;
        if (comm_.rank() == b.root) {
          ++counts_->broadcasts;
          counts_->bytes_sent += b.nbytes;
          bytes.assign(static_cast<const char*>(b.data), b.nbytes);
        }
        CKPTDB_RETURN_IF_ERROR(comm_.Broadcast(&bytes, b.root));
        if (bytes.size() != b.nbytes)
          return Status::Internal("broadcast sizes differ between ranks");
        if (comm_.rank() != b.root) std::memcpy(b.data, bytes.data(), b.nbytes);
      }
      return Status::OK();
    }

   private:
    Communicator& comm_;
    const Device device_;
    HostTransports* counts_;
  };

  const int fail_rank_;
};

// The device seams of a DB on the "device" `device`: with `transports`'
// factory when given, else without transports (device slices for other ranks
// travel through host memory).
inline engine::DeviceSeams HostSeams(HostAsDevice& device,
                                     HostTransports* transports = nullptr) {
  engine::DeviceSeams seams;
  seams.copier = &device;
  if (transports != nullptr) seams.transports = transports->Factory();
  return seams;
}

// DB::Open with `devices` as the DB's device seams (HostSeams); nullptr after
// a failed open, which fails the test.
inline std::unique_ptr<DB> OpenWithDevices(const std::string& path,
                                           std::shared_ptr<Communicator> comm,
                                           const Options& options,
                                           engine::DeviceSeams devices) {
  auto db = engine::OpenDB(options, path, std::move(comm), std::move(devices));
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

}  // namespace ckptdb::testing
