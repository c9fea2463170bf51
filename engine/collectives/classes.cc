#include "engine/collectives/classes.h"

#include <xxhash.h>

#include <map>
#include <new>

#include "engine/collectives/sealed_communicator.h"
#include "engine/collectives/wire.h"

namespace ckptdb::engine {
namespace {

Status Malformed() {
  return Status::Internal("malformed class digest from a rank");
}

// The 24 bytes naming a shared payload: XXH3-128 and length. A payload is
// trusted to its digest: ranks of one job, 2^-128 odds of a collision.
std::string Digest(std::string_view shared) {
  const XXH128_hash_t h = XXH3_128bits(shared.data(), shared.size());
  WireWriter w;
  w.U64(h.low64);
  w.U64(h.high64);
  w.U64(shared.size());
  return w.Take();
}

constexpr size_t kDigestBytes = 24;

}  // namespace

std::string EncodeClassDigest(std::string_view own, std::string_view shared) {
  std::string out = Digest(shared);
  out.append(own);
  return out;
}

std::vector<bool> ClassRepresentatives(
    const std::vector<std::string>& digests) {
  std::vector<bool> first(digests.size(), false);
  std::map<std::string_view, bool> seen;
  for (size_t r = 0; r < digests.size(); ++r) {
    const std::string_view d =
        std::string_view(digests[r]).substr(0, kDigestBytes);
    first[r] = seen.emplace(d, true).second;
  }
  return first;
}

Result<RankClasses> ClassesFromGathered(const std::vector<std::string>& digests,
                                        std::vector<std::string> shared) {
  if (shared.size() != digests.size()) return Malformed();
  RankClasses out;
  out.class_of_rank.resize(digests.size());
  out.own.resize(digests.size());
  std::map<std::string_view, int> class_of_digest;
  for (size_t r = 0; r < digests.size(); ++r) {
    if (digests[r].size() < kDigestBytes) return Malformed();
    const std::string_view d =
        std::string_view(digests[r]).substr(0, kDigestBytes);
    auto [it, added] =
        class_of_digest.emplace(d, static_cast<int>(out.payloads.size()));
    if (added) {
      if (Digest(shared[r]) != d) return Malformed();
      out.payloads.push_back(std::move(shared[r]));
    } else if (!shared[r].empty()) {
      return Malformed();
    }
    out.class_of_rank[r] = it->second;
    out.own[r] = digests[r].substr(kDigestBytes);
  }
  return out;
}

Result<RankClasses> AllGatherClasses(Communicator& comm,
                                     const CallArguments& args,
                                     std::string_view own,
                                     std::string_view shared) {
  if (comm.size() == 1) {  // one class, nothing to digest or exchange
    return RankClasses{{std::string(shared)}, {0}, {std::string(own)}};
  }
  CKPTDB_ASSIGN_OR_RETURN(
      std::vector<std::string> digests,
      AllGatherAgreed(comm, args, EncodeClassDigest(own, shared)));
  const bool sends = ClassRepresentatives(digests)[comm.rank()];
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> payloads,
                          comm.AllGather(sends ? shared : std::string_view()));
  return ClassesFromGathered(digests, std::move(payloads));
}

Result<std::vector<std::string>> GatherToRoot(Communicator& comm,
                                              std::string_view bytes) {
  if (comm.size() == 1) return std::vector<std::string>{std::string(bytes)};
  std::string sealed;
  if (comm.rank() != 0) {
    sealed = bytes;
    Seal(&sealed);
  }
  WireWriter w;
  w.U64(sealed.size());
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> sizes,
                          comm.AllGather(w.Take()));
  std::vector<std::string> out;
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  if (comm.rank() == 0) {
    out.resize(sizes.size());
    out[0] = std::string(bytes);
    for (size_t r = 1; r < sizes.size(); ++r) {
      uint64_t n = 0;
      WireReader reader(sizes[r]);
      if (!reader.U64(&n) || n > (uint64_t{1} << 40))
        return Status::Internal("malformed size from rank " +
                                std::to_string(r));
      try {
        out[r].resize(n);
      } catch (const std::bad_alloc&) {
        return Status::IOError("rank " + std::to_string(r) + " sends " +
                               std::to_string(n) +
                               " bytes, more than this rank can hold");
      }
      recvs.push_back({static_cast<int>(r), out[r].data(), out[r].size()});
    }
  } else {
    sends.push_back({0, sealed.data(), sealed.size()});
  }
  CKPTDB_RETURN_IF_ERROR(comm.Exchange(sends, recvs));
  for (size_t r = 1; r < out.size(); ++r)
    CKPTDB_RETURN_IF_ERROR(Unseal(&out[r], static_cast<int>(r)));
  return out;
}

}  // namespace ckptdb::engine
