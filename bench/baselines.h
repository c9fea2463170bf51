#pragma once

// The plain-file baselines ckpt-bench measures ckptdb against, in the same run:
// each rank writes its shards to one file and fsyncs it, reads files back
// (optionally checksumming each chunk-sized piece, as a verifying reader
// must), and moves bytes between ranks as plain MPI messages.

#include <cstdint>
#include <string>

#include "bench/harness.h"
#include "ckptdb/mpi.h"

namespace ckptdb::bench {

// Keeps values computed only for their cost from being optimized away.
extern volatile uint64_t benchmark_sink;

// The baseline file of `rank`.
std::string BaselineFile(const Config& c, int rank);

// The file IncrementalFloor writes for `rank` (not the baseline file, which
// the loads' baselines read).
std::string ChangedFile(const Config& c, int rank);

// Writes `l`'s buffers to this rank's baseline file, then fsyncs it. With
// `check`, it writes pieces of the chunk size, each right after its checksum
// and content hash (one XXH3-128 pass, as a save computes them): the ceiling
// for a save that checksums what it stores.
void BaselineWrite(const Config& c, int rank, const Layout& l,
                   bool check = false);

// The least an incremental save of `l` does when nothing tracks which bytes
// changed: hash every chunk-sized piece (as BaselineWrite with `check`, writing
// nothing), then write the first `changed` buffers (the changed tensors) to
// ChangedFile and fsync it.
void IncrementalFloor(const Config& c, int rank, const Layout& l,
                      size_t changed);

// Reads `l.bytes()` bytes starting at byte `from` of the concatenated rank
// files (`writers` of them, `per_writer` bytes each) into `l`'s buffers, in
// order. With `check`, it reads pieces of the chunk size and checksums each as
// it lands, as any reader that verifies what it reads must: the ceiling for a
// verified load.
void BaselineRead(const Config& c, int writers, uint64_t per_writer,
                  uint64_t from, Layout& l, bool check = false);

// The exchange of a reshard as plain MPI: each rank sends `nbytes` (taken
// from `l`'s buffers) to the next rank in a ring and receives what the
// previous one sends, in messages of up to 16 MiB: a floor for moving the
// same bytes between the same processes. What arrives lands in `l`'s buffers
// (other ones than those sent from), as a reshard's slices land in its
// targets' memory: a small receive buffer would stay in cache and flatter the
// floor.
void ExchangeFloor(MPI_Comm comm, uint64_t nbytes, Layout& l);

}  // namespace ckptdb::bench
