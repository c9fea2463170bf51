#pragma once

// Payloads that many ranks share (the layouts of data-parallel replicas)
// travel once: each rank sends a digest of its payload, and only the lowest
// rank of each digest sends the payload itself.

#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/status.h"
#include "engine/collectives/agreement.h"

namespace ckptdb::engine {

// Ranks grouped by their shared payload: class c's payload, and each rank's
// class. Classes are numbered by their lowest rank.
struct RankClasses {
  std::vector<std::string> payloads;
  std::vector<int> class_of_rank;
  // Every rank's own payload (AllGatherClasses' `own`), indexed by rank.
  std::vector<std::string> own;
};

// The first exchange's contribution of one rank: its own payload and the
// digest of its shared one (XXH3-128 and length).
std::string EncodeClassDigest(std::string_view own, std::string_view shared);

// Whether the rank that sent `digest` sends its shared payload in the second
// exchange: it is the lowest rank with that digest. `digests` by rank.
std::vector<bool> ClassRepresentatives(const std::vector<std::string>& digests);

// The classes from what the two exchanges delivered: every rank's digest and
// the shared payloads (empty for ranks that are not representatives). Pure;
// Internal on malformed input.
Result<RankClasses> ClassesFromGathered(const std::vector<std::string>& digests,
                                        std::vector<std::string> shared);

// Every rank's `own` payload and the classes of their `shared` ones, once the
// ranks agree on `args` (AllGatherAgreed). Two exchanges: digests, then each
// class's payload from its lowest rank; the bytes received grow with the
// number of ranks only by a digest each. Collective.
Result<RankClasses> AllGatherClasses(Communicator& comm,
                                     const CallArguments& args,
                                     std::string_view own,
                                     std::string_view shared);

// Every rank's `bytes`, on rank 0 only (the others get an empty vector): the
// sizes travel to every rank, the bytes only to rank 0. Collective.
Result<std::vector<std::string>> GatherToRoot(Communicator& comm,
                                              std::string_view bytes);

}  // namespace ckptdb::engine
