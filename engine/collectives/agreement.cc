#include "engine/collectives/agreement.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "core/checksum.h"
#include "engine/collectives/wire.h"

namespace ckptdb::engine {
namespace {

// Bytes of the digest that leads each rank's message: the encoded arguments'
// length and XXH3-64.
constexpr size_t kDigestBytes = 16;

// Groups of ranks, rank lists and values a message shows at most.
constexpr size_t kMaxGroups = 4;
constexpr size_t kMaxRuns = 8;
constexpr size_t kMaxShown = 64;

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

std::string Optional(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "none";
}

std::string Optional(const std::optional<std::string>& v) {
  return v ? Quoted(*v) : "none";
}

std::string Selector(const CheckpointSelector& which) {
  return which.kind == CheckpointSelector::Kind::kLatest ? "none (the latest)"
                                                         : which.ToString();
}

// "ranks 0 and 2 passed 'a', rank 1 passed 'b'": the ranks behind each
// distinct value of `values` (indexed by rank), in order of first rank.
std::string Groups(const std::vector<std::string>& values, const char* verb) {
  std::vector<std::string> distinct;
  std::map<std::string, std::vector<int>> ranks;
  for (size_t r = 0; r < values.size(); ++r) {
    auto& group = ranks[values[r]];
    if (group.empty()) distinct.push_back(values[r]);
    group.push_back(static_cast<int>(r));
  }
  std::string out;
  size_t listed_ranks = 0;
  for (size_t i = 0; i < distinct.size() && i < kMaxGroups; ++i) {
    const std::string& v = distinct[i];
    const std::vector<int>& group = ranks[v];
    out += (i > 0 ? ", " : "") + RankList(group) + " " + verb + " " +
           (v.size() <= kMaxShown ? v : v.substr(0, kMaxShown) + "...");
    listed_ranks += group.size();
  }
  if (distinct.size() > kMaxGroups) {
    out += ", and " + std::to_string(values.size() - listed_ranks) +
           " other ranks " + verb + " " +
           std::to_string(distinct.size() - kMaxGroups) + " other values";
  }
  return out;
}

// Each argument's name and printed value per rank, "none" where a rank lacks
// it; names in order of first appearance.
std::vector<std::pair<std::string, std::vector<std::string>>> ByName(
    const std::vector<CallArguments>& by_rank) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    for (const auto& [name, printed] : by_rank[r].items()) {
      auto [it, added] = index.emplace(name, out.size());
      if (added)
        out.emplace_back(name,
                         std::vector<std::string>(by_rank.size(), "none"));
      out[it->second].second[r] = printed;
    }
  }
  return out;
}

std::string Digest(const std::string& encoded) {
  WireWriter w;
  w.U64(encoded.size());
  w.U64(storage::ChunkChecksum(encoded.data(), encoded.size()));
  return w.Take();
}

// The CompareArguments error of every rank's `encoded` arguments. Collective.
// The argument SaveArguments adds for a rank whose input could not be used.
constexpr std::string_view kInputError = "(this rank's input error)";

Status Disagreement(Communicator& comm, const std::string& encoded) {
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> all,
                          comm.AllGather(encoded));
  std::vector<CallArguments> by_rank;
  for (const std::string& bytes : all) {
    CKPTDB_ASSIGN_OR_RETURN(CallArguments args, CallArguments::Decode(bytes));
    by_rank.push_back(std::move(args));
  }
  Status s = CompareArguments(by_rank);
  if (s.ok())
    return Status::Internal("ranks' call arguments differ in digest only");
  return s;
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::vector<std::string> runs;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    std::string run = std::to_string(ranks[i]);
    if (j > i) run.append("-").append(std::to_string(ranks[j]));
    runs.push_back(std::move(run));
    i = j + 1;
  }
  std::string out = "ranks ";
  const size_t shown = std::min(runs.size(), kMaxRuns);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += i + 1 == runs.size() ? " and " : ", ";
    out += runs[i];
  }
  if (shown < runs.size()) out += " and others";
  return out;
}

CallArguments& CallArguments::Add(std::string name, std::string printed) {
  items_.emplace_back(std::move(name), std::move(printed));
  return *this;
}

std::string CallArguments::Encode() const {
  WireWriter w;
  w.Str(call_);
  w.U64(items_.size());
  for (const auto& [name, printed] : items_) {
    w.Str(name);
    w.Str(printed);
  }
  return w.Take();
}

Result<CallArguments> CallArguments::Decode(std::string_view bytes) {
  WireReader r(bytes);
  CallArguments out;
  uint64_t n = 0;
  if (!r.Str(&out.call_) || !r.U64(&n) || n > bytes.size() / 16)
    return Status::Internal("malformed call arguments received from a rank");
  out.items_.resize(n);
  for (auto& [name, printed] : out.items_) {
    if (!r.Str(&name) || !r.Str(&printed))
      return Status::Internal("malformed call arguments received from a rank");
  }
  if (!r.done())
    return Status::Internal("malformed call arguments received from a rank");
  return out;
}

CallArguments OpenArguments(const Options& options) {
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  CallArguments args("open");
  args.Add("read_only", flag(options.read_only))
      .Add("max_chunk_bytes", std::to_string(options.max_chunk_bytes))
      .Add("keep_last", Optional(options.keep_last))
      .Add("keep_every_steps", Optional(options.keep_every_steps))
      .Add("incremental", flag(options.incremental))
      .Add("incremental_depth", std::to_string(options.incremental_depth))
      .Add("sync", flag(options.sync));
  return args;
}

namespace {

// Adds this rank's input error, when it has one, to `args`.
void AddInputError(CallArguments& args, const Status& input) {
  if (!input.ok()) {
    args.Add(
        std::string(kInputError),
        std::to_string(static_cast<int>(input.code())) + ":" + input.message());
  }
}

}  // namespace

CallArguments SaveArguments(const SaveOptions& options, std::string_view call,
                            const Status& input) {
  CallArguments args{std::string(call)};
  AddInputError(args, input);
  args.Add("step", Optional(options.step)).Add("tag", Optional(options.tag));
  for (const auto& [key, value] : options.user_metadata)
    args.Add("user metadata " + Quoted(key), Quoted(value));
  return args;
}

CallArguments LoadArguments(const CheckpointSelector& which,
                            const LoadOptions& options, const Status& input) {
  CallArguments args("load");
  AddInputError(args, input);
  args.Add("selector (step, tag or id)", Selector(which))
      .Add("strict", options.strict ? "true" : "false")
      .Add("cast", options.cast ? "true" : "false");
  return args;
}

CallArguments DeleteArguments(const CheckpointSelector& which) {
  CallArguments args("delete");
  args.Add("selector (step, tag or id)", Selector(which));
  return args;
}

Status CompareArguments(const std::vector<CallArguments>& by_rank) {
  std::vector<std::string> calls;
  for (const CallArguments& args : by_rank) calls.push_back(args.call());
  if (std::set<std::string>(calls.begin(), calls.end()).size() > 1) {
    return Status::InvalidArgument(
        "ranks called different collective operations: " +
        Groups(calls, "called"));
  }
  // A rank whose input could not be used differs in stand-ins: its own
  // error says why (the lowest such rank's, as FirstError would).
  for (size_t r = 0; r < by_rank.size(); ++r) {
    for (const auto& [name, printed] : by_rank[r].items()) {
      if (name != kInputError) continue;
      const size_t colon = printed.find(':');
      int code = static_cast<int>(StatusCode::kInvalidArgument);
      if (colon != std::string::npos)
        (void)std::from_chars(printed.data(), printed.data() + colon, code);
      return Status(
          static_cast<StatusCode>(code),
          "rank " + std::to_string(r) + ": " +
              printed.substr(colon == std::string::npos ? 0 : colon + 1));
    }
  }
  std::string message;
  for (const auto& [name, values] : ByName(by_rank)) {
    if (std::set<std::string>(values.begin(), values.end()).size() == 1)
      continue;
    message += message.empty() ? "ranks disagree on the " + calls[0] + "'s "
                               : "; and on its ";
    message += name + ": " + Groups(values, "passed");
  }
  return message.empty() ? Status::OK() : Status::InvalidArgument(message);
}

Result<std::vector<std::string>> AllGatherAgreed(Communicator& comm,
                                                 const CallArguments& args,
                                                 std::string_view payload) {
  if (comm.size() == 1) return std::vector<std::string>{std::string(payload)};
  const std::string encoded = args.Encode();
  std::string message = Digest(encoded);
  message.append(payload);
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                          comm.AllGather(message));
  bool agreed = true;
  for (size_t r = 0; r < gathered.size(); ++r) {
    const std::string& m = gathered[r];
    if (m.empty()) {
      // What a rank closing the store sends (DB::Close): a call's part
      // always holds the digest.
      return PeerClosing(static_cast<int>(r), args.call());
    }
    if (m.size() < kDigestBytes) {
      return Status::Internal("malformed call arguments received from rank " +
                              std::to_string(r));
    }
    agreed =
        agreed && m.compare(0, kDigestBytes, message, 0, kDigestBytes) == 0;
  }
  // Every rank sees the same digests, so all take the same branch.
  if (!agreed) return Disagreement(comm, encoded);
  for (std::string& m : gathered) m.erase(0, kDigestBytes);
  return gathered;
}

Result<int64_t> IdFromRootAgreed(
    Communicator& comm, const CallArguments& args,
    const std::function<Result<int64_t>()>& at_root) {
  std::string mine;
  if (comm.rank() == 0) {
    Result<int64_t> id = at_root();
    WireWriter w;
    w.Status(id.status());
    w.I64(id.ok() ? *id : 0);
    mine = w.Take();
  }
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                          AllGatherAgreed(comm, args, mine));
  WireReader r(gathered[0]);
  Status status;
  int64_t id = 0;
  if (!r.Status(&status) || !r.I64(&id))
    return Status::Internal("malformed checkpoint id received from rank 0");
  CKPTDB_RETURN_IF_ERROR(status);
  return id;
}

}  // namespace ckptdb::engine
