#pragma once

#include <memory>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"
#include "ckptdb/types.h"
#include "engine/device/device.h"
#include "engine/device/device_transport.h"

namespace ckptdb::engine {

// What a DB reaches device memory through, given to it at open: the copier of
// device tensors and the factory of transports between the ranks' devices.
// DB::Open gives the build's own (BuiltDeviceSeams); tests give host
// stand-ins (tests/testing/host_device.h), so that every device branch of save
// and load runs on machines without a GPU.
struct DeviceSeams {
  // nullptr: device tensors are InvalidArgument.
  DeviceCopier* copier = nullptr;
  // Empty: no transport; device slices for other ranks travel through host
  // memory.
  DeviceTransportFactory transports;

  // Creates the transport of `comm` with this rank's memory on `device`, or
  // FailedPrecondition saying why there is none. Collective; the caller agrees
  // on the outcome (a rank may fail where others succeed).
  Result<std::unique_ptr<DeviceTransport>> CreateTransport(
      Communicator& comm, const Device& device) const;
};

// The build's own seams: the CUDA copier and the NCCL transport when the
// build has CUDA and the machine a device; no copier otherwise.
DeviceSeams BuiltDeviceSeams();

}  // namespace ckptdb::engine
