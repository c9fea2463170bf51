#include "engine/device/device_seams.h"

namespace ckptdb::engine {

Result<std::unique_ptr<DeviceTransport>> DeviceSeams::CreateTransport(
    Communicator& comm, const Device& device) const {
  if (!transports) {
    return Status::FailedPrecondition(
        "no device transport: device slices travel through host memory");
  }
  return transports(comm, device);
}

DeviceSeams BuiltDeviceSeams() {
  return {BuiltDeviceCopier(), BuildDeviceTransport};
}

}  // namespace ckptdb::engine
