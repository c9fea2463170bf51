#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/status.h"

namespace ckptdb {

// One buffer sent to a peer in Communicator::Exchange.
struct SendBuffer {
  int peer = 0;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// One buffer received from a peer in Communicator::Exchange; `nbytes` must
// equal what the peer sends, in the same order per (sender, receiver) pair.
struct RecvBuffer {
  int peer = 0;
  void* data = nullptr;
  size_t nbytes = 0;
};

// Receives posted before the exchange that completes them
// (Communicator::PostRecvs). Every handle goes to ExchangePosted: one destroyed
// otherwise leaves the order of later messages undefined.
class PostedRecvs {
 public:
  virtual ~PostedRecvs() = default;
};

// The group of ranks a collective call runs over. Every collective method must
// be called by every rank in the same order. Implementations: single process,
// in-process threads (below), MPI. Thread-safety: one collective at a time per
// communicator.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Status Barrier() = 0;
  // Returns every rank's `bytes`, indexed by rank.
  virtual Result<std::vector<std::string>> AllGather(
      std::string_view bytes) = 0;
  // Replaces `*bytes` on every rank by root's.
  virtual Status Broadcast(std::string* bytes, int root) = 0;
  // Moves every send to its peer's matching receive (matched in order per peer
  // pair). Returns when all of this rank's sends and receives are complete.
  virtual Status Exchange(std::span<const SendBuffer> sends,
                          std::span<const RecvBuffer> recvs) = 0;
  // Exchange in two steps. PostRecvs posts `recvs` before this rank has its
  // sends ready, so that peers' messages may arrive while it does other work
  // (their buffers stay in use until ExchangePosted returns). ExchangePosted
  // moves `sends` and returns when they and the posted receives are complete.
  // Receives from a peer match its sends in the order they were posted.
  // REQUIRES: handles go to ExchangePosted in the order they were posted, and
  // no other call that receives runs on this communicator while a handle is
  // outstanding (a collective, an Exchange with receives, or anything layered
  // on the communicator, such as a device transport over it); sends alone may.
  // Not collective: each rank posts its own. The default posts nothing early:
  // ExchangePosted makes the receives itself.
  virtual Result<std::unique_ptr<PostedRecvs>> PostRecvs(
      std::span<const RecvBuffer> recvs);
  virtual Status ExchangePosted(std::span<const SendBuffer> sends,
                                std::unique_ptr<PostedRecvs> posted);
  // OK when a background thread may make this communicator's calls while the
  // caller's own threads go on making theirs (DB::SaveAsync); otherwise why
  // not (for MPI: the library was not initialized with MPI_THREAD_MULTIPLE).
  virtual Status CheckBackgroundUse() const { return Status::OK(); }
};

// The communicator of a job with one rank.
std::shared_ptr<Communicator> SingleProcessCommunicator();

// `size` communicators of one group inside this process, one per rank: element
// r is rank r, to be used by one thread each. Runs several ranks in one process
// (tests, single-machine tools). REQUIRES: size >= 1.
std::vector<std::shared_ptr<Communicator>> InProcessCommunicators(int size);

}  // namespace ckptdb
