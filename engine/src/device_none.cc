// Built without CUDA: device tensors are refused unless a test installs a
// stand-in copier.
#include "engine/src/device.h"

namespace ckptdb::engine {

DeviceCopier* BuildDeviceCopier() { return nullptr; }

}  // namespace ckptdb::engine
