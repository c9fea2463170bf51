#pragma once

// Arguments of a collective call that every rank must pass alike: a save's
// step, tag and user metadata, a load's selector, strict and cast, a delete's
// selector. They are checked in an exchange the call makes anyway: each rank
// sends a digest of its arguments along with its own payload, and only when
// the digests differ do the ranks exchange the arguments themselves, to name
// what differs.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/metadata.h"
#include "ckptdb/options.h"
#include "ckptdb/status.h"

namespace ckptdb::engine {

// The arguments of one collective call as (name, printed value) pairs, in the
// order messages list them. Two calls agree when their names and printed
// values are equal, so a printed value must tell apart every two values
// (strings are quoted, an absent value is "none"). Value type.
class CallArguments {
 public:
  using Item = std::pair<std::string, std::string>;

  // `call` names the call in messages: "save", "load", "delete".
  explicit CallArguments(std::string call = "") : call_(std::move(call)) {}

  // Appends an argument. REQUIRES: `name` is not there yet.
  CallArguments& Add(std::string name, std::string printed);

  const std::string& call() const { return call_; }
  const std::vector<Item>& items() const { return items_; }

  std::string Encode() const;
  // Internal when `bytes` is not an Encode() output.
  static Result<CallArguments> Decode(std::string_view bytes);

 private:
  std::string call_;
  std::vector<Item> items_;
};

// The arguments of DB::Open, DB::Save (or SaveAsync: `call`), DB::Load and
// DB::Delete that must agree. An open's are the Options every rank acts on
// alike (read_only, max_chunk_bytes, retention, incremental saves, sync).
CallArguments OpenArguments(const Options& options);
// `input` (save and load): this rank's own error when its input could not be
// used (a state dict or options its binding could not convert, whose
// stand-ins then differ from the other ranks' arguments); CompareArguments
// reports that error rather than the differences it causes, and before
// anything the call finds in the store.
CallArguments SaveArguments(const SaveOptions& options,
                            std::string_view call = "save",
                            const Status& input = Status::OK());
CallArguments LoadArguments(const CheckpointSelector& which,
                            const LoadOptions& options,
                            const Status& input = Status::OK());
CallArguments DeleteArguments(const CheckpointSelector& which);

// `ranks` (ascending) as messages name them: "rank 3", "ranks 0-2, 5 and 7"
// (runs past the first few are "and others").
std::string RankList(const std::vector<int>& ranks);

// OK when every rank passed the same arguments (`by_rank[r]` is rank r's);
// otherwise InvalidArgument naming each argument that differs and, for each
// of its values, the ranks that passed it: "ranks disagree on the save's tag:
// ranks 0 and 2 passed 'a', rank 1 passed 'b'". Pure.
Status CompareArguments(const std::vector<CallArguments>& by_rank);

// Every rank's `payload`, indexed by rank, when every rank passed the same
// `args`; otherwise the CompareArguments error, the same on every rank (the
// disagreement costs a second exchange, agreement none). Collective.
Result<std::vector<std::string>> AllGatherAgreed(Communicator& comm,
                                                 const CallArguments& args,
                                                 std::string_view payload);

// As IdFromRoot (wire.h): rank 0 runs `at_root` and every rank returns its
// outcome, but only once the ranks are known to agree on `args`; a
// disagreement wins over at_root's outcome. `at_root` runs before the
// agreement is known, so it must not change anything. Collective.
Result<int64_t> IdFromRootAgreed(
    Communicator& comm, const CallArguments& args,
    const std::function<Result<int64_t>()>& at_root);

}  // namespace ckptdb::engine
