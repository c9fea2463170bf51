#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/types.h"
#include "engine/device/device.h"

namespace ckptdb::engine {

// Checks what only the owning rank can: the view's ranks agree and its box lies
// inside its global shape (planner::CheckBoxInside, the box test of the
// partition check the save planner runs on all ranks' boxes), or its flat
// range inside the flattened tensor; its strides are one per dimension and
// not negative (not 0 on a device); its device is known and usable, its
// memory is present when it holds bytes. For a device view, waits for the
// work queued on its device (`copier`->Synchronize): the caller's producer
// may still be writing the tensor. Without a copier, device views are
// InvalidArgument.
Status CheckView(const std::string& flat_key, const TensorView& view,
                 DeviceCopier* copier);

// CheckView, and no two elements of a load target share memory (a stride of
// 0, or strides that step into each other).
Status CheckTargetView(const std::string& flat_key, const TensorView& view,
                       DeviceCopier* copier);

// A load target and its key.
struct KeyedView {
  std::string_view flat_key;  // the state dict's, which outlives the check
  const TensorView* view;
};

// No byte of memory belongs to two of `targets` (each checked with
// CheckTargetView), unless they are the same array (same memory, dtype,
// device, shape and strides: tied weights under two keys). Views that
// interleave more finely than an exact test can afford are refused too.
// `tied_before` receives, ascending, the index of every target that is the
// same array as a target after it in `targets`.
Status CheckTargetsApart(const std::vector<KeyedView>& targets,
                         std::vector<size_t>* tied_before);

}  // namespace ckptdb::engine
