#pragma once

// The priority of the store's background threads: a background save, its
// writers, and the removal of a deleted checkpoint's files yield to the
// caller's threads (the training step) where they compete for a core, and run
// at full speed where nothing competes.

namespace ckptdb {

// How much a background thread's nice value is raised above the process's.
inline constexpr int kBackgroundNice = 5;

// Lowers the calling thread's priority: Linux gives each thread its own nice
// value, set here to the process's (its main thread's) plus kBackgroundNice,
// at most 19, unless it is already that low: a background thread started by
// another (which it inherits the value from) ends at the same value, not
// lower. Elsewhere, or when refused, the priority stays.
void LowerThisThreadsPriority();

}  // namespace ckptdb
