#include "engine/device/device_transport.h"

#include <mutex>

#include "engine/device/device.h"

namespace ckptdb::engine {

// Defined by device_nccl.cc in CUDA builds, by device_none.cc otherwise.
Result<std::unique_ptr<DeviceTransport>> BuildDeviceTransport(
    Communicator& comm, const Device& device);

namespace {
std::mutex factory_mu;
DeviceTransportFactory& TestFactory() {
  static DeviceTransportFactory factory;
  return factory;
}
}  // namespace

void SetDeviceTransportFactoryForTesting(DeviceTransportFactory factory) {
  std::lock_guard lock(factory_mu);
  TestFactory() = std::move(factory);
}

Result<std::unique_ptr<DeviceTransport>> CreateDeviceTransport(
    Communicator& comm, const Device& device) {
  DeviceTransportFactory factory;
  {
    std::lock_guard lock(factory_mu);
    factory = TestFactory();
  }
  if (factory) return factory(comm, device);
  if (IsTestDeviceCopier()) {
    // A stand-in copier's "device" memory is host memory: no real transport
    // may touch it.
    return Status::FailedPrecondition(
        "a test device copier is installed without a test transport");
  }
  return BuildDeviceTransport(comm, device);
}

}  // namespace ckptdb::engine
