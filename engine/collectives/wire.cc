#include "engine/collectives/wire.h"

#include <cstdint>
#include <cstring>

namespace ckptdb::engine {

void WireWriter::Shape(const ckptdb::Shape& shape) {
  U64(shape.size());
  for (int64_t d : shape) I64(d);
}

void WireWriter::Strings(const std::vector<std::string>& parts) {
  U64(parts.size());
  for (const auto& p : parts) Str(p);
}

void WireWriter::Kinds(const PathKinds& kinds) {
  std::string bytes;
  for (PathPartKind k : kinds) bytes.push_back(static_cast<char>(k));
  Str(bytes);
}

void WireWriter::Status(const ckptdb::Status& status) {
  U64(static_cast<uint64_t>(status.code()));
  Str(status.message());
}

void WireWriter::Value(const ckptdb::Value& value) {
  U64(value.index());
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>)
          I64(x);
        else if constexpr (std::is_same_v<T, double>)
          F64(x);
        else if constexpr (std::is_same_v<T, bool>)
          U64(x ? 1 : 0);
        else if constexpr (std::is_same_v<T, std::string>)
          Str(x);
        else if constexpr (std::is_same_v<T, Bytes>)
          Str(x.data);
        else if constexpr (std::is_same_v<T, BigInt>)
          Str(x.digits);
        else
          static_assert(std::is_same_v<T, None>, "every Value is written");
      },
      value);
}

template <typename T>
bool WireReader::Fixed(T* v) {
  if (in_.size() < sizeof(T)) return false;
  std::memcpy(v, in_.data(), sizeof(T));
  in_.remove_prefix(sizeof(T));
  return true;
}

bool WireReader::U64(uint64_t* v) { return Fixed(v); }

bool WireReader::I64(int64_t* v) {
  uint64_t u;
  if (!U64(&u)) return false;
  *v = static_cast<int64_t>(u);
  return true;
}

bool WireReader::F64(double* v) { return Fixed(v); }

bool WireReader::Str(std::string* s) {
  uint64_t n;
  if (!U64(&n) || n > in_.size()) return false;
  s->assign(in_.data(), n);
  in_.remove_prefix(n);
  return true;
}

bool WireReader::Shape(ckptdb::Shape* shape) {
  uint64_t n;
  if (!U64(&n) || n > in_.size() / 8) return false;
  shape->resize(n);
  for (auto& d : *shape) {
    if (!I64(&d)) return false;
  }
  return true;
}

bool WireReader::Strings(std::vector<std::string>* parts) {
  uint64_t n;
  if (!U64(&n) || n > in_.size() / 8) return false;
  parts->resize(n);
  for (auto& p : *parts) {
    if (!Str(&p)) return false;
  }
  return true;
}

bool WireReader::Kinds(PathKinds* kinds, size_t path_size) {
  std::string bytes;
  if (!Str(&bytes)) return false;
  if (!bytes.empty() && bytes.size() != path_size) return false;
  kinds->clear();
  for (char b : bytes) {
    const auto raw = static_cast<uint8_t>(b);
    if (raw > static_cast<uint8_t>(PathPartKind::kTupleIndex)) return false;
    kinds->push_back(static_cast<PathPartKind>(raw));
  }
  return true;
}

bool WireReader::Status(ckptdb::Status* status) {
  uint64_t code;
  std::string message;
  if (!U64(&code) || !Str(&message) ||
      code > static_cast<uint64_t>(StatusCode::kInternal)) {
    return false;
  }
  *status = ckptdb::Status(static_cast<StatusCode>(code), std::move(message));
  return true;
}

bool WireReader::Value(ckptdb::Value* value) {
  uint64_t index, u;
  if (!U64(&index)) return false;
  std::string s;
  switch (index) {
    case 0:
      if (!U64(&u)) return false;
      *value = static_cast<int64_t>(u);
      return true;
    case 1: {
      double d;
      if (!F64(&d)) return false;
      *value = d;
      return true;
    }
    case 2:
      if (!U64(&u)) return false;
      *value = u != 0;
      return true;
    case 3:
      if (!Str(&s)) return false;
      *value = std::move(s);
      return true;
    case 4:
      if (!Str(&s)) return false;
      *value = Bytes{std::move(s)};
      return true;
    case 5:
      *value = None{};
      return true;
    case 6:
      if (!Str(&s)) return false;
      *value = BigInt{std::move(s)};
      return true;
    default:
      return false;
  }
}

namespace {

ckptdb::Status Malformed(const char* what) {
  return ckptdb::Status::Internal(std::string("malformed ") + what +
                                  " received from a rank");
}

}  // namespace

std::string EncodeSaveLayout(const ckptdb::Status& local,
                             const planner::RankSaveLayout& layout) {
  WireWriter w;
  w.Status(local);
  w.U64(layout.shards.size());
  for (const auto& s : layout.shards) {
    w.Str(s.flat_key);
    w.Strings(s.path);
    w.Kinds(s.kinds);
    w.U64(static_cast<uint64_t>(s.dtype));
    w.Shape(s.global_shape);
    w.Shape(s.box.origin);
    w.Shape(s.box.shape);
  }
  w.U64(layout.values.size());
  for (const auto& v : layout.values) {
    w.Str(v.flat_key);
    w.Strings(v.path);
    w.Kinds(v.kinds);
    w.Value(v.value);
  }
  return w.Take();
}

ckptdb::Status DecodeSaveLayout(std::string_view bytes, ckptdb::Status* local,
                                planner::RankSaveLayout* layout) {
  WireReader r(bytes);
  uint64_t n;
  if (!r.Status(local) || !r.U64(&n) || n > bytes.size())
    return Malformed("save layout");
  layout->shards.resize(n);
  for (auto& s : layout->shards) {
    uint64_t dtype;
    if (!r.Str(&s.flat_key) || !r.Strings(&s.path) ||
        !r.Kinds(&s.kinds, s.path.size()) || !r.U64(&dtype) ||
        !IsValidDType(static_cast<uint8_t>(dtype)) ||
        !r.Shape(&s.global_shape) || !r.Shape(&s.box.origin) ||
        !r.Shape(&s.box.shape)) {
      return Malformed("save layout");
    }
    s.dtype = static_cast<DType>(dtype);
  }
  if (!r.U64(&n) || n > bytes.size()) return Malformed("save layout");
  layout->values.resize(n);
  for (auto& v : layout->values) {
    if (!r.Str(&v.flat_key) || !r.Strings(&v.path) ||
        !r.Kinds(&v.kinds, v.path.size()) || !r.Value(&v.value)) {
      return Malformed("save layout");
    }
  }
  return r.done() ? ckptdb::Status::OK() : Malformed("save layout");
}

std::string EncodeTargets(const RankTargets& t) {
  WireWriter w;
  w.Status(t.status);
  w.U64(t.buffer_bytes);
  w.I64(t.device);
  w.U64(t.targets.size());
  for (size_t i = 0; i < t.targets.size(); ++i) {
    w.Str(t.targets[i].flat_key);
    w.Shape(t.targets[i].box.origin);
    w.Shape(t.targets[i].box.shape);
    w.U64(static_cast<uint64_t>(t.placements[i].dtype));
    w.U64(t.placements[i].on_device);
  }
  return w.Take();
}

ckptdb::Status DecodeTargets(std::string_view bytes, RankTargets* t) {
  WireReader r(bytes);
  uint64_t n;
  int64_t device;
  if (!r.Status(&t->status) || !r.U64(&t->buffer_bytes) || !r.I64(&device) ||
      device < -1 || device > INT32_MAX || !r.U64(&n) || n > bytes.size())
    return Malformed("load targets");
  t->device = static_cast<int>(device);
  t->targets.resize(n);
  t->placements.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t dtype, on_device;
    if (!r.Str(&t->targets[i].flat_key) ||
        !r.Shape(&t->targets[i].box.origin) ||
        !r.Shape(&t->targets[i].box.shape) || !r.U64(&dtype) ||
        !IsValidDType(static_cast<uint8_t>(dtype)) || !r.U64(&on_device) ||
        on_device > 1) {
      return Malformed("load targets");
    }
    t->placements[i] = {static_cast<DType>(dtype), on_device == 1};
  }
  return r.done() ? ckptdb::Status::OK() : Malformed("load targets");
}

std::string EncodeSaveOutcome(const SaveOutcome& outcome) {
  const CheckpointInfo& info = outcome.info;
  WireWriter w;
  w.Status(outcome.status);
  w.I64(info.id);
  w.U64(info.step.has_value());
  w.I64(info.step.value_or(0));
  w.U64(info.tag.has_value());
  w.Str(info.tag.value_or(""));
  w.F64(info.created);
  w.I64(info.world_size);
  w.I64(info.num_tensors);
  w.I64(info.nbytes);
  w.I64(info.nbytes_written);
  w.U64(info.references.size());
  for (int64_t id : info.references) w.I64(id);
  w.U64(outcome.deleted);
  return w.Take();
}

ckptdb::Status DecodeSaveOutcome(std::string_view bytes, SaveOutcome* outcome) {
  CheckpointInfo* info = &outcome->info;
  WireReader r(bytes);
  uint64_t has_step, has_tag;
  int64_t step, world;
  std::string tag;
  if (!r.Status(&outcome->status) || !r.I64(&info->id) || !r.U64(&has_step) ||
      !r.I64(&step) || !r.U64(&has_tag) || !r.Str(&tag) ||
      !r.F64(&info->created) || !r.I64(&world) || !r.I64(&info->num_tensors) ||
      !r.I64(&info->nbytes) || !r.I64(&info->nbytes_written)) {
    return Malformed("save outcome");
  }
  uint64_t references = 0;
  if (!r.U64(&references) || references > bytes.size() / 8)
    return Malformed("save outcome");
  info->references.resize(references);
  for (int64_t& id : info->references) {
    if (!r.I64(&id)) return Malformed("save outcome");
  }
  uint64_t deleted = 0;
  if (!r.U64(&deleted) || !r.done()) return Malformed("save outcome");
  outcome->deleted = deleted != 0;
  info->step = has_step ? std::optional<int64_t>(step) : std::nullopt;
  info->tag = has_tag ? std::optional<std::string>(tag) : std::nullopt;
  info->world_size = static_cast<int32_t>(world);
  return ckptdb::Status::OK();
}

std::string EncodeStatus(const ckptdb::Status& status) {
  WireWriter w;
  w.Status(status);
  return w.Take();
}

ckptdb::Status DecodeStatus(std::string_view bytes) {
  ckptdb::Status status;
  const ckptdb::Status decoded = DecodeStatus(bytes, &status);
  return decoded.ok() ? status : decoded;
}

ckptdb::Status DecodeStatus(std::string_view bytes, ckptdb::Status* status) {
  WireReader r(bytes);
  if (!r.Status(status) || !r.done()) return Malformed("status");
  return ckptdb::Status::OK();
}

ckptdb::Status FirstError(const std::vector<ckptdb::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r].ok()) continue;
    if (statuses.size() == 1) return statuses[r];
    return statuses[r].WithContext("rank " + std::to_string(r));
  }
  return ckptdb::Status::OK();
}

namespace {
// How PeerClosing's message ends (IsPeerClosing).
constexpr std::string_view kPeerClosing =
    " (it may be closing the store): every rank must make the same "
    "collective calls in the same order";
}  // namespace

ckptdb::Status PeerClosing(int rank, std::string_view call) {
  return ckptdb::Status::InvalidArgument(
      "rank " + std::to_string(rank) + " is not in this " + std::string(call) +
      std::string(kPeerClosing));
}

bool IsPeerClosing(const ckptdb::Status& s) {
  return s.code() == StatusCode::kInvalidArgument &&
         s.message().find(kPeerClosing) != std::string::npos;
}

ckptdb::Status AgreeOnStatus(Communicator& comm, const ckptdb::Status& local) {
  if (comm.size() == 1) return local;
  CKPTDB_ASSIGN_OR_RETURN(auto all, comm.AllGather(EncodeStatus(local)));
  std::vector<ckptdb::Status> statuses;
  for (size_t r = 0; r < all.size(); ++r) {
    // A status is never empty: what a closing rank sends (DB::Close).
    if (all[r].empty()) return PeerClosing(static_cast<int>(r), "call");
    statuses.push_back(DecodeStatus(all[r]));
  }
  return FirstError(statuses);
}

ckptdb::Status OutcomeNotLearned(const ckptdb::Status& failed,
                                 std::string_view unknown) {
  return ckptdb::Status(
      failed.code(), std::string(unknown) +
                         ": this rank could not learn the outcome from "
                         "rank 0 (" +
                         failed.ToString() + "); list the checkpoints to see");
}

ckptdb::Status OutcomeNotShared(const ckptdb::Status& failed,
                                std::string_view known) {
  return ckptdb::Status(failed.code(),
                        std::string(known) +
                            ", but the other ranks could not learn it (" +
                            failed.ToString() + ")");
}

ckptdb::Status StatusFromRoot(Communicator& comm,
                              const std::function<ckptdb::Status()>& at_root) {
  std::string bytes;
  if (comm.rank() == 0) bytes = EncodeStatus(at_root());
  CKPTDB_RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
  return DecodeStatus(bytes);
}

Result<std::vector<int64_t>> IdsFromRoot(
    Communicator& comm,
    const std::function<Result<std::vector<int64_t>>()>& at_root) {
  std::string bytes;
  if (comm.rank() == 0) {
    Result<std::vector<int64_t>> ids = at_root();
    WireWriter w;
    w.Status(ids.status());
    w.U64(ids.ok() ? ids->size() : 0);
    if (ids.ok()) {
      for (int64_t id : *ids) w.I64(id);
    }
    bytes = w.Take();
  }
  CKPTDB_RETURN_IF_ERROR(comm.Broadcast(&bytes, 0));
  WireReader r(bytes);
  ckptdb::Status status;
  uint64_t n = 0;
  if (!r.Status(&status) || !r.U64(&n) || n > bytes.size() / 8)
    return Malformed("checkpoint ids");
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids) {
    if (!r.I64(&id)) return Malformed("checkpoint ids");
  }
  CKPTDB_RETURN_IF_ERROR(status);
  return ids;
}

Result<int64_t> IdFromRoot(Communicator& comm,
                           const std::function<Result<int64_t>()>& at_root) {
  CKPTDB_ASSIGN_OR_RETURN(
      std::vector<int64_t> ids,
      IdsFromRoot(comm, [&]() -> Result<std::vector<int64_t>> {
        CKPTDB_ASSIGN_OR_RETURN(int64_t id, at_root());
        return std::vector<int64_t>{id};
      }));
  if (ids.size() != 1) return Malformed("checkpoint id");
  return ids.front();
}

Result<planner::SaveClasses> DecodeSaveClasses(const RankClasses& gathered) {
  return DecodeSaveClasses(gathered, -1, nullptr, Status::OK());
}

Result<planner::SaveClasses> DecodeSaveClasses(const RankClasses& gathered,
                                               int rank,
                                               planner::RankSaveLayout* own,
                                               const Status& own_status) {
  planner::SaveClasses classes;
  classes.class_of_rank = gathered.class_of_rank;
  classes.layouts.resize(gathered.payloads.size());
  std::vector<Status> statuses(gathered.class_of_rank.size());
  std::vector<Status> by_class(gathered.payloads.size());
  const int own_class =
      own != nullptr && rank >= 0 &&
              static_cast<size_t>(rank) < gathered.class_of_rank.size()
          ? gathered.class_of_rank[rank]
          : -1;
  for (size_t c = 0; c < gathered.payloads.size(); ++c) {
    if (static_cast<int>(c) == own_class) {
      classes.layouts[c] = std::move(*own);
      by_class[c] = own_status;
      continue;
    }
    CKPTDB_RETURN_IF_ERROR(DecodeSaveLayout(gathered.payloads[c], &by_class[c],
                                            &classes.layouts[c]));
  }
  for (size_t r = 0; r < statuses.size(); ++r)
    statuses[r] = by_class[gathered.class_of_rank[r]];
  CKPTDB_RETURN_IF_ERROR(FirstError(statuses));
  return classes;
}

Result<planner::SaveClasses> GatherSaveClasses(Communicator& comm,
                                               const CallArguments& args,
                                               planner::RankSaveLayout* own,
                                               const Status& own_status) {
  if (comm.size() == 1) {
    CKPTDB_RETURN_IF_ERROR(own_status);
    planner::SaveClasses classes;
    classes.class_of_rank = {0};
    classes.layouts.push_back(std::move(*own));
    return classes;
  }
  CKPTDB_ASSIGN_OR_RETURN(
      RankClasses gathered,
      AllGatherClasses(comm, args, "", EncodeSaveLayout(own_status, *own)));
  return DecodeSaveClasses(gathered, comm.rank(), own, own_status);
}

Result<GatheredTargets> DecodeTargetClasses(const RankClasses& gathered) {
  return DecodeTargetClasses(gathered, -1, nullptr);
}

Result<GatheredTargets> DecodeTargetClasses(const RankClasses& gathered,
                                            int rank, RankTargets* own_shared) {
  GatheredTargets out;
  const size_t world = gathered.class_of_rank.size();
  out.classes.class_of_rank = gathered.class_of_rank;
  out.statuses.resize(world);
  out.devices.resize(world);
  for (size_t r = 0; r < world; ++r) {
    RankTargets own;
    CKPTDB_RETURN_IF_ERROR(DecodeTargets(gathered.own[r], &own));
    out.statuses[r] = std::move(own.status);
    out.devices[r] = own.device;
    out.buffer_bytes = std::min(out.buffer_bytes, own.buffer_bytes);
  }
  const int own_class =
      own_shared != nullptr && rank >= 0 && static_cast<size_t>(rank) < world
          ? gathered.class_of_rank[rank]
          : -1;
  for (size_t c = 0; c < gathered.payloads.size(); ++c) {
    RankTargets shared;
    if (static_cast<int>(c) == own_class) {
      shared = std::move(*own_shared);
    } else {
      CKPTDB_RETURN_IF_ERROR(DecodeTargets(gathered.payloads[c], &shared));
    }
    for (const TargetPlacement& p : shared.placements)
      out.any_on_device |= p.on_device;
    out.classes.targets.push_back(std::move(shared.targets));
    out.classes.placements.push_back(std::move(shared.placements));
  }
  return out;
}

}  // namespace ckptdb::engine
