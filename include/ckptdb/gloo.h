#pragma once

// The gloo communicator: collective calls of a DB run over TCP connections
// between the ranks of a group (the gloo library), set up through a key-value
// store the ranks share. This is how ranks of a PyTorch job talk without MPI:
// the store is torch.distributed's (the TCPStore of an env:// rendezvous), and
// only the group's members take part.

#include <chrono>
#include <memory>
#include <string>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"

namespace ckptdb {

// A key-value store every rank of a group reaches: torch.distributed's store,
// or one in memory for ranks that are threads of one process. Used only while
// communicators are made (each rank publishes its address and reads the
// others'). Implementations must be safe to call from several threads.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until some rank has set it (up to the store's
  // own timeout: then an error naming the key).
  virtual Result<std::string> Get(const std::string& key) = 0;
};

struct GlooOptions {
  // This rank's index in the group and the group's size. Every member makes
  // its communicator with the same `prefix` and `size`, and no two
  // communicators alive in one store share a prefix.
  int rank = 0;
  int size = 1;
  std::string prefix = "ckptdb";
  // The network interface (GLOO_SOCKET_IFNAME's meaning: "eth0") or host name
  // whose address the other ranks connect to. Both empty: the address the
  // machine's host name resolves to.
  std::string interface {};
  std::string hostname{};
  // How long one collective call waits for its peers before it fails with an
  // IOError naming them (a save's commit waits for the slowest writer).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

// Connects to every other rank of the group through `store` (collective over
// the group's members) and returns this rank's communicator. Its calls may run
// on a background thread (DB::SaveAsync) while the caller's threads go on with
// their own work; one call at a time.
Result<std::shared_ptr<Communicator>> GlooCommunicator(
    std::shared_ptr<RendezvousStore> store, const GlooOptions& options);

// A store in this process's memory, for ranks that are threads of one process
// (tests, tools).
std::shared_ptr<RendezvousStore> InMemoryRendezvousStore();

}  // namespace ckptdb
