#pragma once

// Byte encodings of what ranks exchange in collective calls (layouts, targets,
// statuses). Only ranks of one job read them, but decoding still checks every
// length.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "engine/collectives/classes.h"
#include "planner/exchange_plan.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"

namespace ckptdb::engine {

class WireWriter {
 public:
  void U64(uint64_t v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s);
  }
  void Shape(const ckptdb::Shape& shape);
  void Strings(const std::vector<std::string>& parts);
  // A path's part kinds, one byte each.
  void Kinds(const PathKinds& kinds);
  void Status(const ckptdb::Status& status);
  void Value(const ckptdb::Value& value);
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  bool U64(uint64_t* v);
  bool I64(int64_t* v);
  bool F64(double* v);
  bool Str(std::string* s);
  bool Shape(ckptdb::Shape* shape);
  bool Strings(std::vector<std::string>* parts);
  // False unless empty or `path_size` valid kinds.
  bool Kinds(PathKinds* kinds, size_t path_size);
  bool Status(ckptdb::Status* status);
  bool Value(ckptdb::Value* value);
  bool done() const { return in_.empty(); }

 private:
  // Reads sizeof(T) raw bytes.
  template <typename T>
  bool Fixed(T* v);

  std::string_view in_;
};

// A rank's contribution to a collective step: its local status and payload.
std::string EncodeSaveLayout(const Status& local,
                             const planner::RankSaveLayout& layout);
Status DecodeSaveLayout(std::string_view bytes, Status* local,
                        planner::RankSaveLayout* layout);

// The save layouts of every class (AllGatherClasses over EncodeSaveLayout);
// the first failing rank's local status (FirstError) when any failed.
Result<planner::SaveClasses> DecodeSaveClasses(const RankClasses& gathered);
// The same on rank `rank`, whose own class's layout is `*own` (moved from,
// not decoded: the ranks of a class sent identical bytes) with its local
// status `own_status`.
Result<planner::SaveClasses> DecodeSaveClasses(const RankClasses& gathered,
                                               int rank,
                                               planner::RankSaveLayout* own,
                                               const Status& own_status);

// Every rank's save layout, once per class (EncodeSaveLayout, AllGatherClasses
// once the ranks agree on `args`, DecodeSaveClasses): this rank's own is
// `*own` (moved from), with its local status `own_status`. A rank alone is
// the only class: its layout is taken as it is, nothing encoded or sent.
// Collective.
Result<planner::SaveClasses> GatherSaveClasses(Communicator& comm,
                                               const CallArguments& args,
                                               planner::RankSaveLayout* own,
                                               const Status& own_status);

// Where a load target lives, as every rank learns it (planner/exchange_plan.h).
using TargetPlacement = planner::TargetPlacement;

// What a rank contributes to a load: its local status, load buffer size
// (Options::load_buffer_bytes), the device its DeviceTransport would use (-1:
// none), and its targets.
struct RankTargets {
  Status status;
  uint64_t buffer_bytes = 0;
  int device = -1;
  std::vector<planner::LoadTarget> targets;
  std::vector<TargetPlacement> placements;  // parallel to targets
};

std::string EncodeTargets(const RankTargets& targets);
Status DecodeTargets(std::string_view bytes, RankTargets* targets);

// A load's targets as gathered by AllGatherClasses: each rank's own part
// (status, buffer size, device: EncodeTargets without targets) and the
// targets with their placements, once per class (EncodeTargets of only
// those).
struct GatheredTargets {
  // Every class's targets and their placements.
  planner::TargetClasses classes;
  std::vector<Status> statuses;
  std::vector<int> devices;
  // The smallest buffer any rank passed.
  uint64_t buffer_bytes = UINT64_MAX;
  bool any_on_device = false;
};
Result<GatheredTargets> DecodeTargetClasses(const RankClasses& gathered);
// The same on rank `rank`, whose own class's targets and placements are
// `*own_shared` (moved from, not decoded: the ranks of a class sent identical
// bytes).
Result<GatheredTargets> DecodeTargetClasses(const RankClasses& gathered,
                                            int rank, RankTargets* own_shared);

// What rank 0 tells every rank after a save: the commit's status, the
// checkpoint's summary, and whether the retention policy deleted (or tried to
// delete) a checkpoint, after which the other ranks let go of its files.
struct SaveOutcome {
  Status status;
  CheckpointInfo info;
  bool deleted = false;
};
std::string EncodeSaveOutcome(const SaveOutcome& outcome);
Status DecodeSaveOutcome(std::string_view bytes, SaveOutcome* outcome);

std::string EncodeStatus(const Status& status);
Status DecodeStatus(std::string_view bytes);
// The same, telling a well-formed error (in `*status`, OK returned) from
// malformed bytes (the error returned).
Status DecodeStatus(std::string_view bytes, Status* status);

// Runs `at_root` on rank 0 and gives its outcome to every rank. Collective.
Status StatusFromRoot(Communicator& comm,
                      const std::function<Status()>& at_root);
Result<int64_t> IdFromRoot(Communicator& comm,
                           const std::function<Result<int64_t>()>& at_root);
// The same for a list of ids.
Result<std::vector<int64_t>> IdsFromRoot(
    Communicator& comm,
    const std::function<Result<std::vector<int64_t>>()>& at_root);

// The errors of a change of the store that rank 0 makes (a commit, a delete)
// when its outcome does not reach every rank (`failed`, the communicator's or
// the decoding's error, whose code they keep): a rank other than 0 says
// `unknown` ("checkpoint id 3 may be committed"), rank 0 what it knows
// happened (`known`: "checkpoint id 3 is committed").
Status OutcomeNotLearned(const Status& failed, std::string_view unknown);
Status OutcomeNotShared(const Status& failed, std::string_view known);

// Every rank contributes `local`; all get FirstError of them (PeerClosing
// for a rank that sent no part). Collective.
Status AgreeOnStatus(Communicator& comm, const Status& local);

// What a collective call says of rank `rank`, which sent no part of its
// first all-gather: it is closing the store (DB::Close) while this rank
// makes `call` (InvalidArgument).
Status PeerClosing(int rank, std::string_view call);
// Whether `s` is PeerClosing's error: that rank has then left the handle's
// collective calls.
bool IsPeerClosing(const Status& s);

// The first failing status of all ranks (lowest rank), prefixed with its rank
// when several ranks take part; OK when every rank succeeded.
Status FirstError(const std::vector<Status>& statuses);

}  // namespace ckptdb::engine
