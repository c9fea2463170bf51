// ckptdb-plan-sim: the planning of DB::Save and DB::Load for one rank of a
// large job, on one core, without the job: the layouts are generated
// (bench/llama_model.h) and encoded as the wire would deliver them, then the
// engine's own planning functions run on them. Each phase runs in a forked
// child under an address-space limit, so that a planner that does not fit
// fails cleanly; its peak RSS is the child's. See bench/README.md, "Planning
// at scale".
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/llama_model.h"
#include "engine/collectives/classes.h"
#include "engine/collectives/wire.h"
#include "engine/load/load_executor.h"
#include "engine/load/load_planning.h"
#include "engine/save/save_record.h"
#include "planner/exchange_plan.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"

namespace ckptdb::bench {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds this process has used (the machine may be shared: wall time
// then overstates the planning's own time).
double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

// This process's peak resident memory so far, in bytes.
uint64_t SelfPeakRss() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

struct SimConfig {
  LlamaConfig model;
  // The job that saves, and the one that loads its checkpoint.
  Parallelism save{8, 16, 128};
  Parallelism load{16, 16, 64};
  // The rank simulated (both phases); -1: the heaviest of each (HeaviestRank).
  int rank = -1;
  // Options::max_chunk_bytes.
  size_t max_chunk_bytes = size_t{512} << 10;
  // The exchange's window: the smallest load_buffer_bytes of the ranks
  // (DBImpl::load_buffer_bytes).
  uint64_t round_bytes = uint64_t{8} << 19;
  // RLIMIT_AS of each phase's child; 0: none.
  double mem_limit_gib = 20;
  bool json = false;
  // Where the save phase leaves the record for the load phase.
  std::string record_path;
};

// ---------------------------------------------------------------------------
// Inputs, as the wire delivers them to every rank. Not timed.

// What the two exchanges of AllGatherClasses give each rank in DB::Save: every
// rank's digest of its EncodeSaveLayout, then each class's layout from its
// lowest rank (empty from the others). DP replicas hold the same shards: each
// distinct layout is encoded and digested once and copied.
struct GatheredClasses {
  std::vector<std::string> digests;
  std::vector<std::string> payloads;
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& d : digests) n += d.size();
    for (const auto& p : payloads) n += p.size();
    return n;
  }
};

// What the two exchanges deliver when every rank of `par` sends `own` and the
// shared payload of its (tp, pp) position, `shared[r % (tp x pp)]`: the
// digests of all ranks, then each class's payload from its lowest rank.
GatheredClasses Gather(const Parallelism& par, const std::string& own,
                       const std::vector<std::string>& shared) {
  const int classes = par.tp * par.pp;
  std::vector<std::string> digests;
  for (const std::string& payload : shared)
    digests.push_back(engine::EncodeClassDigest(own, payload));
  GatheredClasses gathered;
  gathered.digests.resize(par.world());
  for (int r = 0; r < par.world(); ++r)
    gathered.digests[r] = digests[r % classes];
  gathered.payloads.resize(par.world());
  const std::vector<bool> sends =
      engine::ClassRepresentatives(gathered.digests);
  for (int r = 0; r < par.world(); ++r) {
    if (sends[r]) gathered.payloads[r] = shared[r % classes];
  }
  return gathered;
}

GatheredClasses GatheredSaveLayouts(const LlamaConfig& model,
                                    const Parallelism& par) {
  std::vector<std::string> layouts;
  for (int r = 0; r < par.tp * par.pp; ++r) {
    layouts.push_back(engine::EncodeSaveLayout(
        Status::OK(), SaveLayoutOf(RankShards(model, par, r))));
  }
  return Gather(par, "", layouts);
}

// What the two exchanges of AllGatherClasses give each rank in DB::Load: every
// rank's own part (EncodeTargets of status, buffer and device) with the digest
// of its targets and placements, then each class's targets from its lowest
// rank (host targets of the stored dtype, no device transport).
GatheredClasses GatheredTargets(const LlamaConfig& model,
                                const Parallelism& par, uint64_t buffer_bytes) {
  engine::RankTargets own;
  own.buffer_bytes = buffer_bytes;
  own.device = -1;
  std::vector<std::string> shared;
  for (int r = 0; r < par.tp * par.pp; ++r) {
    const std::vector<ModelShard> shards = RankShards(model, par, r);
    engine::RankTargets mine;
    mine.targets = LoadTargetsOf(shards);
    for (const ModelShard& s : shards)
      mine.placements.push_back({s.tensor.dtype, false});
    shared.push_back(engine::EncodeTargets(mine));
  }
  return Gather(par, engine::EncodeTargets(own), shared);
}

// A writer's checksums, as XXH3 would give them: well-mixed 64-bit values.
uint64_t FakeChecksum(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

// ---------------------------------------------------------------------------
// The engine's planning, exactly as DB::Save and DB::Load call it today. These
// three functions are the seams to switch when the engine's planning changes.

// DB::Save steps 1-3 (save.cc) on `rank`: the classes of layouts decoded from
// the gathered bytes, then the rank's part of the plan (`rank` -1: the whole
// plan, as rank 0 builds it for the record in CommitOnRoot). Fills
// "decode_seconds", "plan_seconds", "seconds" (wall) and "cpu_seconds" of
// `out`.
Result<planner::SavePlan> SimulateSavePlanning(GatheredClasses gathered,
                                               int rank, size_t max_chunk_bytes,
                                               Json& out) {
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  CKPTDB_ASSIGN_OR_RETURN(engine::RankClasses classes,
                          engine::ClassesFromGathered(
                              gathered.digests, std::move(gathered.payloads)));
  CKPTDB_ASSIGN_OR_RETURN(planner::SaveClasses layouts,
                          engine::DecodeSaveClasses(classes));
  out["decode_seconds"] = SecondsSince(start);
  out["classes"] = layouts.layouts.size();
  const auto plan_start = Clock::now();
  auto plan = planner::BuildClassSavePlan(layouts, max_chunk_bytes, rank);
  out["plan_seconds"] = SecondsSince(plan_start);
  out["seconds"] = SecondsSince(start);
  out["cpu_seconds"] = CpuSeconds() - cpu_start;
  return plan;
}

// Rank 0's commit (CommitOnRoot in save_commit.cc): the record built from the
// plan and every writer's checksums, encoded as Store::Commit stores it.
Result<std::vector<std::pair<std::string, std::string>>> SimulateMetadata(
    planner::SavePlan plan, int world, Json& out) {
  std::vector<std::vector<engine::WrittenChunk>> sums_by_rank(world);
  uint64_t next = 0;
  for (const auto& tensor : plan.tensors) {
    for (const auto& chunk : tensor.chunks)
      sums_by_rank[chunk.writer_rank].push_back({FakeChecksum(next++)});
  }
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  CKPTDB_ASSIGN_OR_RETURN(
      CheckpointMetadata meta,
      engine::CommitRecord(std::move(plan), /*id=*/1, SaveOptions{}, world,
                           sums_by_rank));
  auto records = storage::EncodeCheckpointRecords(meta);
  out["encode_seconds"] = SecondsSince(start);
  out["encode_cpu_seconds"] = CpuSeconds() - cpu_start;
  out["chunks"] = next;
  out["records"] = records.size();
  return records;
}

// The records as DB::Load reads them (Store::GetMetadata(id, keys)): the main
// record (every tensor's dtype and shape, without the paths), then the records
// of the tensors `keys` names only (the small tensors' record for those of few
// chunks). `records` by key, the main record first.
Result<CheckpointMetadata> SimulateRecordDecode(
    const std::map<std::string, std::string>& records,
    const std::vector<std::string>& keys, Json& out) {
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  if (records.empty()) return Status::Corruption("no records");
  CKPTDB_ASSIGN_OR_RETURN(storage::MainRecord main,
                          storage::DecodeMainRecord(records.begin()->second,
                                                    /*paths=*/false));
  const int64_t id = main.meta.info.id;
  uint64_t decoded = 0;
  // The small tensors' chunks, from their record (those of `keys`).
  auto small = records.find(storage::SmallTensorsKey(id));
  if (small != records.end()) {
    std::vector<std::string_view> wanted(keys.begin(), keys.end());
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    CKPTDB_RETURN_IF_ERROR(
        storage::DecodeSmallTensors(&main, small->second, &wanted));
  }
  for (const std::string& key : keys) {
    auto tensor = main.meta.tensors.find(key);
    if (tensor != main.meta.tensors.end() && !main.chunk_counts.contains(key)) {
      decoded += tensor->second.chunks.size();  // a small tensor
      continue;
    }
    auto record = records.find(storage::TensorRecordKey(id, key));
    if (tensor == main.meta.tensors.end() || record == records.end())
      return Status::Corruption("no record of tensor '" + key + "'");
    CKPTDB_ASSIGN_OR_RETURN(
        tensor->second.chunks,
        storage::DecodeTensorRecord(main, key, record->second));
    decoded += tensor->second.chunks.size();
  }
  out["decode_seconds"] = SecondsSince(start);
  out["decode_cpu_seconds"] = CpuSeconds() - cpu_start;
  out["decoded_chunks"] = decoded;
  out["decoded_tensors"] = keys.size();
  return std::move(main.meta);
}

// DB::Load (load.cc) after the record on `rank`: the classes of targets
// decoded from the gathered bytes and the rank's part of the plan
// (PlanRankLoad). Fills "decode_seconds", "plan_seconds", "seconds",
// "cpu_seconds", "items" and "reads" (of the rank's part), "classes".
Status SimulateLoadPlanning(const CheckpointMetadata& meta,
                            GatheredClasses gathered, int rank, Json& out) {
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  CKPTDB_ASSIGN_OR_RETURN(engine::RankClasses classes,
                          engine::ClassesFromGathered(
                              gathered.digests, std::move(gathered.payloads)));
  out["decode_seconds"] = SecondsSince(start);
  const auto plan_start = Clock::now();
  CKPTDB_ASSIGN_OR_RETURN(engine::RankLoadPlanning planned,
                          engine::PlanRankLoad(meta.tensors, classes, rank));
  out["plan_seconds"] = SecondsSince(plan_start);
  // The executor's exchange plan (ExecuteLoad), for host targets of the
  // stored dtype.
  const auto exchange_start = Clock::now();
  const engine::GatheredTargets& all = planned.all;
  std::vector<planner::OwnTarget> own;
  const int cls = all.classes.class_of_rank[rank];
  for (size_t t = 0; t < all.classes.targets[cls].size(); ++t) {
    own.push_back({all.classes.targets[cls][t].box,
                   all.classes.placements[cls][t].dtype, true});
  }
  const auto tensor_of_read =
      planner::TensorsOfReads(planned.plan, meta.tensors);
  planner::ExchangeInputs in;
  in.rank = rank;
  in.world = static_cast<int>(all.classes.class_of_rank.size());
  in.plan = &planned.plan;
  in.tensor_of_read = &tensor_of_read;
  in.targets = &own;
  in.placements = [&](int r, size_t target) {
    return all.classes.placements[all.classes.class_of_rank[r]][target];
  };
  in.window_bytes = std::max<uint64_t>(1, all.buffer_bytes);
  const planner::ExchangePlan exchange = planner::BuildExchangePlan(in);
  out["exchange_seconds"] = SecondsSince(exchange_start);
  out["rounds"] = exchange.rounds.size();
  out["seconds"] = SecondsSince(start);
  out["cpu_seconds"] = CpuSeconds() - cpu_start;
  out["classes"] = classes.payloads.size();
  out["items"] = planned.plan.items.size();
  out["reads"] = planned.plan.reads.size();
  uint64_t mine = 0;
  for (const planner::ChunkRead& read : planned.plan.reads)
    mine += read.reader_rank == rank;
  out["rank_reads"] = mine;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Phases, each in a forked child.

// Runs `phase` in a child under RLIMIT_AS = `limit_bytes` (0: none). The child
// fills a JSON object (a failure: "error"); returned with "peak_rss_bytes",
// the child's ru_maxrss, and the child's wall and CPU time ("child_seconds",
// "child_cpu_seconds": inputs and all, up to a failure). An allocation failure
// becomes "out of memory", a child killed by a signal "killed by signal N".
Json RunPhase(const std::function<void(Json&)>& phase, uint64_t limit_bytes) {
  int fds[2];
  if (pipe(fds) != 0) return Json{{"error", "pipe failed"}};
  std::fflush(nullptr);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) return Json{{"error", "fork failed"}};
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (limit_bytes > 0) {
      const rlimit limit{limit_bytes, limit_bytes};
      setrlimit(RLIMIT_AS, &limit);
    }
    Json out = Json::object();
    try {
      phase(out);
    } catch (const std::bad_alloc&) {
      out["error"] = "out of memory";
    } catch (const std::exception& e) {
      out["error"] = e.what();
    }
    const std::string bytes = out.dump();
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fds[1], bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string bytes;
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;)
    bytes.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  Json out = Json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!out.is_object()) out = Json::object();
  if (WIFSIGNALED(status) && !out.contains("error")) {
    const int sig = WTERMSIG(status);
    out["error"] = "killed by signal " + std::to_string(sig) + " (" +
                   strsignal(sig) + "; an abort under the memory limit is " +
                   "likely out of memory)";
  }
  out["peak_rss_bytes"] = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  out["child_seconds"] = SecondsSince(start);
  out["child_cpu_seconds"] =
      usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
      (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  return out;
}

// Writer balance of a save plan: fills `out` and returns max / mean bytes.
double WriterImbalance(const planner::SavePlan& plan, int rank, Json& out) {
  const auto& bytes = plan.bytes_per_rank;
  const auto max = std::max_element(bytes.begin(), bytes.end());
  const double mean = static_cast<double>(plan.total_bytes) / bytes.size();
  out["max_writer_rank"] = max - bytes.begin();
  out["max_write_bytes"] = *max;
  out["mean_write_bytes"] = mean;
  out["rank_write_bytes"] = bytes[rank];
  uint64_t chunks = 0;
  for (const auto& tensor : plan.tensors) chunks += tensor.chunks.size();
  out["chunks"] = chunks;
  return mean > 0 ? static_cast<double>(*max) / mean : 0;
}

// The save phase: the gathered layouts (input), then the planning.
void SavePhase(const SimConfig& c, int rank, Json& out) {
  auto start = Clock::now();
  const auto gathered = GatheredSaveLayouts(c.model, c.save);
  out["input_seconds"] = SecondsSince(start);
  out["gathered_bytes"] = gathered.bytes();
  auto plan =
      SimulateSavePlanning(std::move(gathered), rank, c.max_chunk_bytes, out);
  if (!plan.ok()) {
    out["error"] = plan.status().ToString();
    return;
  }
  out["writer_imbalance"] = WriterImbalance(*plan, rank, out);
}

// The metadata phase: the save plan again (not timed), then rank 0's record,
// left in c.record_path for the load phase.
void MetadataPhase(const SimConfig& c, Json& out) {
  Json ignored;
  auto plan = SimulateSavePlanning(GatheredSaveLayouts(c.model, c.save), -1,
                                   c.max_chunk_bytes, ignored);
  if (!plan.ok()) {
    out["error"] = plan.status().ToString();
    return;
  }
  auto record = SimulateMetadata(std::move(plan).value(), c.save.world(), out);
  if (!record.ok()) {
    out["error"] = record.status().ToString();
    return;
  }
  uint64_t bytes = 0;
  std::ofstream file(c.record_path, std::ios::binary | std::ios::trunc);
  for (const auto& [key, value] : *record) {
    bytes += key.size() + value.size();
    for (const std::string* part : {&key, &value}) {
      const uint64_t n = part->size();
      file.write(reinterpret_cast<const char*>(&n), sizeof(n));
      file.write(part->data(), static_cast<std::streamsize>(n));
    }
  }
  out["bytes"] = bytes;
  out["bytes_per_chunk"] = static_cast<double>(bytes) /
                           std::max<uint64_t>(1, out["chunks"].get<uint64_t>());
  if (!file.flush()) out["error"] = "cannot write " + c.record_path;
}

// The records the metadata phase left in `path`, decoded as loading rank
// `rank` decodes them: the main record and its tensors' records (the read is
// not timed).
Result<CheckpointMetadata> ReadRecords(const SimConfig& c, int rank,
                                       Json& out) {
  std::ifstream file(c.record_path, std::ios::binary);
  std::map<std::string, std::string> records;
  while (true) {
    std::string parts[2];
    bool ok = true;
    for (std::string& part : parts) {
      uint64_t n = 0;
      ok = ok && file.read(reinterpret_cast<char*>(&n), sizeof(n)).good();
      if (!ok) break;
      part.resize(n);
      ok = file.read(part.data(), static_cast<std::streamsize>(n)).good();
    }
    if (!ok) break;
    records.emplace(std::move(parts[0]), std::move(parts[1]));
  }
  std::vector<std::string> keys;
  for (const planner::LoadTarget& t :
       LoadTargetsOf(RankShards(c.model, c.load, rank)))
    keys.push_back(t.flat_key);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return SimulateRecordDecode(records, keys, out);
}

// The load phase: the record decoded (its figures under "record"), the
// gathered targets (input), then the planning.
void LoadPhase(const SimConfig& c, int rank, Json& out) {
  Json& record_out = out["record"];
  const Result<CheckpointMetadata> meta = ReadRecords(c, rank, record_out);
  record_out["peak_rss_bytes"] = SelfPeakRss();
  if (!meta.ok()) {
    out["error"] = "decoding the record: " + meta.status().ToString();
    return;
  }
  const auto start = Clock::now();
  const auto gathered = GatheredTargets(c.model, c.load, c.round_bytes);
  out["input_seconds"] = SecondsSince(start);
  const Status planned =
      SimulateLoadPlanning(*meta, std::move(gathered), rank, out);
  if (!planned.ok()) out["error"] = planned.ToString();
}

// The whole simulation: the three phases, one after the other, as one object
// (bench/README.md lists the fields).
Json Simulate(const SimConfig& c) {
  const uint64_t limit =
      static_cast<uint64_t>(c.mem_limit_gib * double(uint64_t{1} << 30));
  const int save_rank = c.rank >= 0 ? c.rank : HeaviestRank(c.model, c.save);
  const int load_rank = c.rank >= 0 ? c.rank : HeaviestRank(c.model, c.load);
  Json result;
  Json& config = result["config"];
  config["model"] = {{"layers", c.model.layers},
                     {"hidden", c.model.hidden},
                     {"ffn", c.model.ffn},
                     {"vocab", c.model.vocab},
                     {"heads", c.model.heads},
                     {"kv_heads", c.model.kv_heads},
                     {"tensors", ModelTensors(c.model).size()}};
  for (const auto& [name, par] :
       {std::pair{"save", c.save}, {"load", c.load}}) {
    config[name] = {
        {"tp", par.tp}, {"pp", par.pp}, {"dp", par.dp}, {"world", par.world()}};
  }
  config["max_chunk_bytes"] = c.max_chunk_bytes;
  config["round_bytes"] = c.round_bytes;
  config["mem_limit_gib"] = c.mem_limit_gib;

  Json save = RunPhase([&](Json& out) { SavePhase(c, save_rank, out); }, limit);
  save["rank"] = save_rank;
  result["writer_imbalance"] = save.contains("writer_imbalance")
                                   ? save["writer_imbalance"]
                                   : Json(nullptr);
  save.erase("writer_imbalance");
  result["save_plan"] = save;

  Json meta = RunPhase([&](Json& out) { MetadataPhase(c, out); }, limit);
  meta["encode_peak_rss_bytes"] = meta["peak_rss_bytes"];
  meta.erase("peak_rss_bytes");
  Json load;
  if (meta.contains("error")) {
    load["error"] = "no record: the metadata phase failed";
  } else {
    load = RunPhase([&](Json& out) { LoadPhase(c, load_rank, out); }, limit);
    const Json record = load.value("record", Json::object());
    load.erase("record");
    for (const char* field : {"decode_seconds", "decode_cpu_seconds"}) {
      if (record.contains(field)) meta[field] = record[field];
    }
    if (record.contains("peak_rss_bytes"))
      meta["decode_peak_rss_bytes"] = record["peak_rss_bytes"];
  }
  load["rank"] = load_rank;
  result["metadata"] = meta;
  result["load_plan"] = load;
  std::filesystem::remove(c.record_path);
  return result;
}

// "1.52 GiB", "69.1 KiB", ...
std::string Bytes(const Json& bytes) {
  if (!bytes.is_number()) return "?";
  double v = bytes.get<double>();
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g %s", v, units[u]);
  return text;
}

std::string Num(const Json& v, const char* format = "%.3g") {
  if (!v.is_number()) return "?";
  char text[32];
  std::snprintf(text, sizeof(text), format, v.get<double>());
  return text;
}

std::string Layout(const Json& par) {
  return "TP" + par["tp"].dump() + " x PP" + par["pp"].dump() + " x DP" +
         par["dp"].dump() + " (" + par["world"].dump() + " ranks)";
}

// The human-readable form of Simulate's object.
void PrintSummary(const Json& r) {
  const Json& m = r["config"]["model"];
  std::printf(
      "model: %s layers, hidden %s, ffn %s, vocab %s, %s heads (%s KV)"
      ": %s tensors\n",
      m["layers"].dump().c_str(), m["hidden"].dump().c_str(),
      m["ffn"].dump().c_str(), m["vocab"].dump().c_str(),
      m["heads"].dump().c_str(), m["kv_heads"].dump().c_str(),
      m["tensors"].dump().c_str());
  auto error = [](const Json& phase) {
    return phase.contains("error")
               ? "  ERROR: " + phase["error"].get<std::string>()
               : std::string();
  };
  const Json& s = r["save_plan"];
  std::printf(
      "save plan   %s, rank %s: %s s (decode layouts %s s, BuildSavePlan %s "
      "s), peak RSS %s; gathered layouts %s; writer imbalance %s (max %s on "
      "rank %s, mean %s)%s\n",
      Layout(r["config"]["save"]).c_str(), s["rank"].dump().c_str(),
      Num(s["seconds"]).c_str(), Num(s["decode_seconds"]).c_str(),
      Num(s["plan_seconds"]).c_str(), Bytes(s["peak_rss_bytes"]).c_str(),
      Bytes(s["gathered_bytes"]).c_str(), Num(r["writer_imbalance"]).c_str(),
      Bytes(s["max_write_bytes"]).c_str(),
      s.value("max_writer_rank", Json()).dump().c_str(),
      Bytes(s["mean_write_bytes"]).c_str(), error(s).c_str());
  const Json& d = r["metadata"];
  std::printf(
      "metadata    %s chunks, record %s (%s B/chunk): build + encode %s s, "
      "peak RSS %s; decode %s s, peak RSS %s%s\n",
      Num(d["chunks"], "%.0f").c_str(), Bytes(d["bytes"]).c_str(),
      Num(d["bytes_per_chunk"], "%.1f").c_str(),
      Num(d["encode_seconds"]).c_str(),
      Bytes(d["encode_peak_rss_bytes"]).c_str(),
      Num(d["decode_seconds"]).c_str(),
      Bytes(d["decode_peak_rss_bytes"]).c_str(), error(d).c_str());
  const Json& l = r["load_plan"];
  std::printf(
      "load plan   %s, rank %s: %s s (decode targets %s s, BuildRankLoadPlan "
      "%s "
      "s, BuildExchangePlan %s s), peak RSS %s; %s items, %s reads (%s by the "
      "rank), %s rounds%s\n",
      Layout(r["config"]["load"]).c_str(), l["rank"].dump().c_str(),
      Num(l["seconds"]).c_str(), Num(l["decode_seconds"]).c_str(),
      Num(l["plan_seconds"]).c_str(), Num(l["exchange_seconds"]).c_str(),
      Bytes(l["peak_rss_bytes"]).c_str(), Num(l["items"], "%.0f").c_str(),
      Num(l["reads"], "%.0f").c_str(), Num(l["rank_reads"], "%.0f").c_str(),
      Num(l["rounds"], "%.0f").c_str(), error(l).c_str());
}

}  // namespace
}  // namespace ckptdb::bench

int main(int argc, char** argv) {
  using ckptdb::bench::Parallelism;
  ckptdb::bench::SimConfig c;
  CLI::App app{
      "ckptdb-plan-sim: the planning of DB::Save and DB::Load for one rank of "
      "a Llama-3-class job (bench/README.md, \"Planning at scale\")"};
  auto& m = c.model;
  app.add_option("--layers", m.layers, "transformer layers")
      ->capture_default_str();
  app.add_option("--hidden", m.hidden, "hidden size")->capture_default_str();
  app.add_option("--ffn", m.ffn, "MLP size")->capture_default_str();
  app.add_option("--vocab", m.vocab, "vocabulary")->capture_default_str();
  app.add_option("--heads", m.heads, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", m.kv_heads, "key/value heads")
      ->capture_default_str();
  for (auto [prefix, par] :
       {std::pair{"--save", &c.save}, {"--load", &c.load}}) {
    const std::string p = prefix;
    app.add_option(p + "-tp", par->tp, "tensor-parallel degree")
        ->capture_default_str();
    app.add_option(p + "-pp", par->pp, "pipeline stages")
        ->capture_default_str();
    app.add_option(p + "-dp", par->dp, "data-parallel replicas")
        ->capture_default_str();
  }
  app.add_option("--rank", c.rank,
                 "rank simulated in both phases (default: the one holding the "
                 "most bytes in each)");
  size_t max_chunk_kib = c.max_chunk_bytes >> 10;
  app.add_option("--max-chunk-kib", max_chunk_kib,
                 "Options::max_chunk_bytes, in KiB")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--mem-limit-gib", c.mem_limit_gib,
                 "address-space limit of each phase (0: none)")
      ->capture_default_str();
  app.add_option("--record-file", c.record_path,
                 "where the metadata phase leaves the record (default: a file "
                 "in the temp directory, removed at the end)");
  app.add_flag("--json", c.json, "print one JSON object");
  try {
    app.parse(argc, argv);
    for (const auto& [name, par] :
         {std::pair{"save", c.save}, {"load", c.load}}) {
      const ckptdb::Status valid = ckptdb::bench::Validate(c.model, par);
      if (!valid.ok()) throw CLI::ValidationError(name, valid.message());
      if (c.rank >= par.world())
        throw CLI::ValidationError(
            "--rank", "beyond the " + std::string(name) + " job's " +
                          std::to_string(par.world()) + " ranks");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  c.max_chunk_bytes = max_chunk_kib << 10;
  // DBImpl::load_buffer_bytes: a 16th of the rank's state, at most 64 MiB;
  // every rank of these jobs holds gigabytes.
  c.round_bytes = uint64_t{64} << 20;
  if (c.record_path.empty()) {
    c.record_path =
        (std::filesystem::temp_directory_path() /
         ("ckptdb-plan-sim-" + std::to_string(getpid()) + ".record"))
            .string();
  }
  const nlohmann::json result = ckptdb::bench::Simulate(c);
  if (c.json) {
    std::cout << result.dump() << std::endl;
  } else {
    ckptdb::bench::PrintSummary(result);
  }
  return 0;
}
