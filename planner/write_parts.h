#pragma once

// How one rank cuts the chunks it writes into parts written in parallel, a
// staged file each.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ckptdb::planner {

// The bytes of the rank's chunks that make one part, at most.
inline constexpr uint64_t kWritePartBytes = uint64_t{64} << 20;
// The chunks that make one part, at most: a chunk costs the CPU more than its
// bytes' copy (its checksum, its key in the staged table, the incremental
// decision), which a state of many small tensors spends on every thread.
inline constexpr size_t kWritePartChunks = 2048;

// Where each part begins in the write order of the rank's chunks, whose sizes
// in that order are `bytes`, with one more entry, the end: part p writes
// chunks [begins[p], begins[p + 1]). There is a part per `part_bytes` of the
// total or per `part_chunks` chunks, whichever makes more (at least one, at
// most `threads`, at most one per chunk), and a chunk goes to the part whose
// equal share of the total bytes holds the bytes written before it. A part is
// empty when one chunk spans more than a share.
std::vector<size_t> SplitIntoParts(std::span<const uint64_t> bytes, int threads,
                                   uint64_t part_bytes = kWritePartBytes,
                                   size_t part_chunks = kWritePartChunks);

// The order in which an asynchronous save's caller copies chunks into its
// snapshot while each part's writer writes chunks straight from the caller's
// memory, from the front of its part: from the back of every part in turn
// (the last chunk of each part, then the one before it, ...), so that copier
// and writers meet inside each part and the writers then have about as much
// of the copy each to write. `begins` is SplitIntoParts' result; the order
// holds every chunk once.
std::vector<size_t> SnapshotCopyOrder(std::span<const size_t> begins);

}  // namespace ckptdb::planner
