#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb::engine {

// One broadcast of a DeviceTransport step: `root` sends `nbytes` at `data`,
// every other rank receives them at its own `data`.
struct DeviceBroadcast {
  int root = 0;
  void* data = nullptr;
  size_t nbytes = 0;
};

// Moves bytes between the device memories of a group's ranks: NCCL in CUDA
// builds (device_nccl.cc), a stand-in over the host Communicator in tests
// (DeviceSeams). It
// is collective like Communicator: every rank calls Run the same number of
// times, and every buffer is memory of device().
class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;

  virtual const Device& device() const = 0;

  // One step: this rank's sends and receives, posted together as one group
  // (matched in order per peer pair, as in Communicator::Exchange), then the
  // step's broadcasts in order (the same list on every rank). Returns when all
  // of them are complete on this rank.
  virtual Status Run(std::span<const SendBuffer> sends,
                     std::span<const RecvBuffer> recvs,
                     std::span<const DeviceBroadcast> broadcasts) = 0;
};

// Creates a group's transport (DeviceSeams::transports).
using DeviceTransportFactory =
    std::function<Result<std::unique_ptr<DeviceTransport>>(Communicator&,
                                                           const Device&)>;

// The build's transport of `comm` with this rank's memory on `device`: NCCL
// in CUDA builds (device_nccl.cc). Collective. Without one (a CPU-only build,
// two ranks on one GPU) it returns FailedPrecondition saying why, and loads
// move device slices through host memory instead.
Result<std::unique_ptr<DeviceTransport>> BuildDeviceTransport(
    Communicator& comm, const Device& device);

}  // namespace ckptdb::engine
