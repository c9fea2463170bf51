#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace ckptdb {

class FileSystemHooks;

// Largest chunk a store holds: one RocksDB value.
inline constexpr size_t kMaxChunkBytes = size_t{1} << 30;
// The most threads a rank reads or writes chunks with (Options::io_threads).
inline constexpr int kMaxIoThreads = 256;

// How a store is opened. Every field has a default that suits a training job.
struct Options {
  // Create the store directory and database when absent.
  bool create_if_missing = true;
  // Open without the right to save or delete. A read-only open never modifies
  // the directory.
  bool read_only = false;
  // Shards larger than this are split into chunks along their outer dimensions,
  // so that a load needing part of a shard reads only the chunks it needs.
  // The default keeps a chunk within a core's L2 cache while it is read,
  // checksummed and copied: larger chunks cost each pass a trip to memory
  // (bench/README.md has the measurements). A slice along the outermost
  // dimension larger than this is cut along the next dimension, and so on: a
  // [50, 100] float32 shard at 256 bytes is chunks of [1, 64] and [1, 36].
  // REQUIRES: 0 < max_chunk_bytes <= kMaxChunkBytes.
  size_t max_chunk_bytes = size_t{512} << 10;
  // Threads each rank uses to read or write chunks. 0 picks the hardware
  // threads, at least 2 and at most 8.
  // REQUIRES: 0 <= io_threads <= kMaxIoThreads.
  int io_threads = 0;
  // The round of a multi-rank load: each round covers this many bytes of the
  // checkpoint (in its canonical order), and in each a rank holds at most this
  // much plus one chunk for slices moving between ranks (chunks read for
  // others, slices staged before landing in a target). Two rounds are in
  // flight at once: the next one is read while this one is exchanged. Ranks
  // use the smallest value any of them passes. 0 picks a 16th of the bytes of
  // the rank's state dict, at least 8 MiB and at most 64 MiB: larger rounds
  // mean fewer waits for peers (bench/README.md). The handle keeps the host
  // memory of its largest two rounds' staged slices for its next load, until
  // it is closed.
  size_t load_buffer_bytes = 0;
  // Host memory an asynchronous save (DB::SaveAsync) holds for its snapshot
  // of the rank's chunks: 0 takes the bytes the rank writes, so that
  // SaveAsync returns after one copy of them; less makes it wait for earlier
  // chunks to be written before copying more. At least one chunk. Kept for
  // the next asynchronous save. Fresh memory costs many times a copy the
  // first time it is written (page faults; on a VM, the host backing each
  // page), so the memory is set up before a snapshot copies into it: when
  // this is set, on a thread started at open (the first SaveAsync waits for
  // it if it has not finished), so that the first call stalls no longer than
  // later ones; at 0, the first SaveAsync copies into fresh memory while its
  // writers write most chunks from the caller's memory (it stalls longer),
  // and the rest is set up on a thread once it has returned.
  // Set it to the rank's state bytes (or more) to have both.
  size_t snapshot_bytes = 0;
  // An asynchronous save whose snapshot memory holds the rank's whole host
  // state may start its writers beside the snapshot's copy: they write chunks
  // straight from the caller's memory from one end while the call copies the
  // others from the other end, and the call returns where the two meet. That
  // needs a core the copy does not use. nullopt (the default): where the
  // process has 2 cores or more (its CPU binding, else the machine's over the
  // processes the launcher put on the host) and fewer threads are runnable
  // than the machine has, at the time of the call, and wherever the snapshot
  // memory is fresh (see snapshot_bytes: its page faults make the copy far
  // slower than the writers); true or false: always or never.
  std::optional<bool> writers_beside_snapshot{};
  // Retention, applied by every save once its checkpoint is committed: the
  // newest keep_last checkpoints are kept, and older ones are deleted, oldest
  // first, except tagged checkpoints and those whose step is a multiple of
  // keep_every_steps. nullopt keeps every checkpoint (keep_every_steps alone
  // deletes nothing). A failed deletion fails the save with a message saying
  // that its checkpoint is committed. REQUIRES: >= 1 each.
  std::optional<int64_t> keep_last{};
  std::optional<int64_t> keep_every_steps{};
  // fsync ckptdb's own files (the commit journal, markers) and directories.
  // RocksDB syncs the table files it writes either way. Turning it off loses
  // crash safety.
  bool sync = true;
  // Incremental saves: a chunk equal (by its 128-bit content hash) to the same
  // chunk (same key, box and dtype) of one of the store's newest
  // `incremental_depth` checkpoints is not written again; the new checkpoint
  // refers to the stored bytes. Off: every save writes every chunk.
  bool incremental = true;
  // How many of the store's newest checkpoints an incremental save compares
  // each chunk with: a state that goes back to an earlier one (A, B, then A
  // again) shares its bytes while that checkpoint is among them. Each adds a
  // probe of a table of its content hashes per chunk that changed, and rank 0
  // keeps each one's record (its layout and checksums, not its bytes) between
  // saves, for those the store still holds: with keep_last, at most keep_last
  // of them. A job whose records are large (millions of chunks) and that
  // keeps every checkpoint may want 1. REQUIRES: >= 1.
  int incremental_depth = 4;
  // Hooks called before every file operation of the store, RocksDB's and
  // ckptdb's own, from any of its threads (ckptdb/file_system_hooks.h): they
  // see each operation and its path and may fail it with an errno, for tracing
  // I/O, enforcing quotas or testing how a job copes with a failing disk. They
  // must be thread-safe. Each rank passes its own (or none). nullptr (the
  // default) calls nothing and costs one pointer test an operation.
  std::shared_ptr<FileSystemHooks> file_system_hooks{};
  // Set when this rank's open arguments could not be built (a binding
  // converting its language's objects found bad input): DB::Open given it
  // still takes part in the open's first exchange and fails on every rank of
  // the communicator with InvalidArgument naming this rank and the reason, so
  // that the other ranks never wait for, or pair their next open with, a rank
  // that left. Empty (the default): the options are what they say.
  std::optional<std::string> invalid_arguments{};
};

// Per-save parameters.
struct SaveOptions {
  std::optional<int64_t> step{};  // training step recorded with the checkpoint
  std::optional<std::string>
      tag{};  // unique name; saving an existing tag is InvalidArgument
  std::map<std::string, std::string> user_metadata{};
};

// Per-load parameters.
struct LoadOptions {
  // A requested key the checkpoint lacks is NotFound (true) or reported in
  // missing_keys (false).
  bool strict = true;
  // Convert between numeric dtypes when the target's dtype differs from the
  // stored one.
  bool cast = false;
};

}  // namespace ckptdb
