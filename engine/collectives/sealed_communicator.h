#pragma once

// Collective messages that carry their own checksum. A communicator moves a
// rank's bytes; nothing in MPI, gloo or a user's own transport says they
// arrive as sent. Decoded unchecked, one damaged bit became another
// checkpoint id, outcome or size on one rank. Sealed, the call fails naming
// the rank whose message arrived damaged.

#include <memory>
#include <string>
#include <string_view>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"

namespace ckptdb::engine {

// `inner` with every AllGather part and Broadcast sealed (Seal) and checked
// on arrival (Unseal). Exchange's buffers pass through as they are: tensor
// bytes, covered by their chunks' checksums, and messages the caller seals
// itself (GatherToRoot).
std::shared_ptr<Communicator> SealedCommunicator(
    std::shared_ptr<Communicator> inner);

// `message` followed by the 8 bytes of its checksum (XXH3-64).
void Seal(std::string* message);
// Checks and strips the checksum Seal appended to a message from rank
// `from`; IOError naming the rank when it differs.
Status Unseal(std::string* message, int from);

}  // namespace ckptdb::engine
