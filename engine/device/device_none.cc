// Built without CUDA: device tensors are refused unless a DB is given a
// stand-in copier (DeviceSeams), and device slices never travel device to
// device.
#include "engine/device/device.h"
#include "engine/device/device_transport.h"

namespace ckptdb::engine {

DeviceCopier* BuildDeviceCopier() { return nullptr; }

Result<std::unique_ptr<DeviceTransport>> BuildDeviceTransport(Communicator&,
                                                              const Device&) {
  return Status::FailedPrecondition("ckptdb was built without CUDA and NCCL");
}

}  // namespace ckptdb::engine
