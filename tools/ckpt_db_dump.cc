// ckpt-db-dump: inspect, verify and export a ckptdb store without writing code.
// Opens the store read-only (never modifies it); see --help of each command.
// A client of the public API (ckptdb/db.h) only.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ckptdb/db.h"
#include "dump_common.h"
#include "dump_formats.h"
#include "dump_output.h"
#include "dump_slice.h"

namespace ckptdb::tools {
namespace {

// ---- list -------------------------------------------------------------------

int List(const std::string& path, bool as_json) {
  auto store = OpenStore(path);
  if (!store.ok()) return Fail(store.status());
  auto all = (*store)->ListCheckpoints();
  if (!all.ok()) return Fail(all.status());
  if (as_json) {
    json out = json::array();
    for (const CheckpointInfo& info : *all) out.push_back(InfoJson(info));
    std::printf("%s\n", JsonText(out, 2).c_str());
    return 0;
  }
  std::printf("%-6s %-10s %-16s %-19s %6s %8s %12s\n", "id", "step", "tag",
              "created", "ranks", "tensors", "size");
  for (const CheckpointInfo& info : *all) {
    if (!info.damage.empty()) {
      std::printf("%-6lld DAMAGED: %s\n", static_cast<long long>(info.id),
                  info.damage.c_str());
      continue;
    }
    std::printf("%-6lld %-10s %s %-19s %6d %8lld %12s\n",
                static_cast<long long>(info.id),
                info.step ? std::to_string(*info.step).c_str() : "-",
                PadToWidth(TagCell(info.tag), 16).c_str(),
                LocalTime(info.created).c_str(), info.world_size,
                static_cast<long long>(info.num_tensors),
                HumanBytes(info.nbytes).c_str());
  }
  if (all->empty()) std::printf("(no checkpoints)\n");
  return 0;
}

// ---- show -------------------------------------------------------------------

// Bytes of a checkpoint's chunks that other checkpoints use too (incremental
// saves): those it refers to in earlier checkpoints, and those of its own
// that later checkpoints refer to.
struct Sharing {
  uint64_t from_earlier = 0;
  uint64_t with_later = 0;
};

Result<Sharing> SharedBytes(DB& db, const CheckpointMetadata& m) {
  Sharing out;
  out.from_earlier =
      static_cast<uint64_t>(m.info.nbytes - m.info.nbytes_written);
  CKPTDB_ASSIGN_OR_RETURN(auto all, db.ListCheckpoints());
  std::set<std::pair<std::string, Shape>> used;
  for (const CheckpointInfo& info : all) {
    if (!std::binary_search(info.references.begin(), info.references.end(),
                            m.info.id))
      continue;
    CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata later,
                            db.GetMetadata(CheckpointSelector::Id(info.id)));
    for (const auto& [key, t] : later.tensors) {
      for (const ChunkMetadata& c : t.chunks) {
        if (c.holder_id == m.info.id) used.emplace(key, c.box.origin);
      }
    }
  }
  for (const auto& [key, t] : m.tensors) {
    for (const ChunkMetadata& c : t.chunks) {
      if (c.holder_id == 0 && used.contains({key, c.box.origin}))
        out.with_later += c.nbytes;
    }
  }
  return out;
}

void PrintSharing(const Sharing& sharing, const CheckpointInfo& info) {
  std::printf("shares %s with other checkpoints: %s held by earlier ones",
              HumanBytes(sharing.from_earlier + sharing.with_later).c_str(),
              HumanBytes(sharing.from_earlier).c_str());
  if (!info.references.empty()) {
    std::printf(" (ids");
    for (int64_t id : info.references)
      std::printf(" %lld", static_cast<long long>(id));
    std::printf(")");
  }
  std::printf(", %s of its own used by later ones; %s written\n\n",
              HumanBytes(sharing.with_later).c_str(),
              HumanBytes(info.nbytes_written).c_str());
}

int Show(const std::string& path, const Selection& sel, bool as_json,
         bool chunks) {
  auto opened = OpenCheckpoint(path, sel);
  if (!opened.ok()) return Fail(opened.status());
  const CheckpointMetadata& m = opened->meta;
  if (as_json) {
    std::printf("%s\n", JsonText(MetadataJson(m), 2).c_str());
    return 0;
  }
  size_t nchunks = 0;
  for (const auto& [key, t] : m.tensors) nchunks += t.chunks.size();
  std::printf("checkpoint %lld", static_cast<long long>(m.info.id));
  if (m.info.step)
    std::printf("  step %lld", static_cast<long long>(*m.info.step));
  if (m.info.tag) std::printf("  tag %s", TagCell(m.info.tag).c_str());
  std::printf("  created %s  saved by %d rank%s\n",
              LocalTime(m.info.created).c_str(), m.info.world_size,
              m.info.world_size == 1 ? "" : "s");
  std::printf("%zu tensors, %s in %zu chunks; %zu small values\n",
              m.tensors.size(), HumanBytes(m.info.nbytes).c_str(), nchunks,
              m.values.size());
  auto sharing = SharedBytes(*opened->db, m);
  if (!sharing.ok()) return Fail(sharing.status());
  PrintSharing(*sharing, m.info);
  // Keys and metadata as printable lines: a NUL cut them short, a newline
  // split a line.
  size_t width = 3;
  for (const auto& [key, t] : m.tensors)
    width = std::max(width, DisplayWidth(ControlEscaped(key)));
  std::printf("%s  %-13s %-18s %6s %10s\n", PadToWidth("key", width).c_str(),
              "dtype", "shape", "chunks", "size");
  for (const auto& [key, t] : m.tensors) {
    uint64_t bytes = 0;
    for (const ChunkMetadata& c : t.chunks) bytes += c.nbytes;
    std::printf("%s  %-13s %-18s %6zu %10s\n",
                PadToWidth(ControlEscaped(key), width).c_str(),
                std::string(DTypeName(t.dtype)).c_str(),
                ShapeToString(t.global_shape).c_str(), t.chunks.size(),
                HumanBytes(bytes).c_str());
    if (!chunks) continue;
    for (const ChunkMetadata& c : t.chunks) {
      std::printf(
          "%*s    offset %-14s shape %-14s rank %-4d %10s  xxh3 %016llx%s\n",
          static_cast<int>(width), "", ShapeToString(c.box.origin).c_str(),
          ShapeToString(c.box.shape).c_str(), c.writer_rank,
          HumanBytes(c.nbytes).c_str(),
          static_cast<unsigned long long>(c.checksum),
          c.holder_id != 0
              ? ("  in checkpoint " + std::to_string(c.holder_id)).c_str()
              : "");
    }
  }
  if (!m.values.empty()) {
    std::printf("\nvalues\n");
    for (const auto& [key, v] : m.values) {
      std::printf("  %s = %s (%s)\n", ControlEscaped(key).c_str(),
                  ValueText(v).c_str(), std::string(ValueTypeName(v)).c_str());
    }
  }
  if (!m.user_metadata.empty()) {
    std::printf("\nuser metadata\n");
    for (const auto& [k, v] : m.user_metadata)
      std::printf("  %s = %s\n", ControlEscaped(k).c_str(),
                  ControlEscaped(v).c_str());
  }
  return 0;
}

// ---- show --key -------------------------------------------------------------

// Prints the small value `key` of `m` (which holds it).
void ShowValue(const CheckpointMetadata& m, const std::string& key,
               bool as_json) {
  const Value& v = m.values.at(key);
  if (as_json) {
    std::printf("%s\n", JsonText(json({{"id", m.info.id},
                                       {"key", key},
                                       {"type", std::string(ValueTypeName(v))},
                                       {"value", ValueJson(v)}}),
                                 2)
                            .c_str());
  } else {
    // Every byte of a bytes value (the table of `show` gives its size).
    const auto* bytes = std::get_if<Bytes>(&v);
    std::printf("%s = %s (%s)\n", ControlEscaped(key).c_str(),
                (bytes ? BytesText(*bytes) : ValueText(v)).c_str(),
                std::string(ValueTypeName(v)).c_str());
  }
}

// The values of `index` of tensor `key` (read from only the chunks holding
// them), after a line saying what was read; `*read_id` is the checkpoint
// read.
Status ShowValuesOnce(const std::string& path, const Selection& sel,
                      const std::string& key, const std::string& slice,
                      bool as_json, int64_t* read_id) {
  CKPTDB_ASSIGN_OR_RETURN(const TensorIndex index, ParseSlice(slice));
  CKPTDB_ASSIGN_OR_RETURN(Opened opened, OpenCheckpoint(path, sel));
  const CheckpointMetadata& m = opened.meta;
  *read_id = m.info.id;
  if (m.values.count(key) && !m.tensors.count(key)) {
    if (!index.empty()) {
      return Status::InvalidArgument("--slice: '" + key +
                                     "' is a small value, not a tensor");
    }
    ShowValue(m, key, as_json);
    return Status::OK();
  }
  ReadStats stats;
  CKPTDB_ASSIGN_OR_RETURN(
      const Tensor read,
      opened.db->Read(key, CheckpointSelector::Id(m.info.id), index, &stats));
  const TensorMetadata& t = m.tensors.at(key);
  uint64_t stored = 0;
  for (const ChunkMetadata& c : t.chunks) stored += c.nbytes;
  if (as_json) {
    std::printf("%s\n",
                JsonText(json({{"id", m.info.id},
                               {"key", key},
                               {"dtype", std::string(DTypeName(t.dtype))},
                               {"global_shape", t.global_shape},
                               {"index", IndexToString(index)},
                               {"shape", read.shape},
                               {"bytes_read", stats.bytes_read},
                               {"chunks_read", stats.chunks_read},
                               {"values", ValuesJson(read)}}),
                         2)
                    .c_str());
    return Status::OK();
  }
  std::printf(
      "checkpoint %lld  tensor '%s' %s %s  index %s -> shape %s\n"
      "read %llu of %zu chunks (%llu of %llu bytes)\n%s\n",
      static_cast<long long>(m.info.id), ControlEscaped(key).c_str(),
      std::string(DTypeName(t.dtype)).c_str(),
      ShapeToString(t.global_shape).c_str(), IndexToString(index).c_str(),
      ShapeToString(read.shape).c_str(),
      static_cast<unsigned long long>(stats.chunks_read), t.chunks.size(),
      static_cast<unsigned long long>(stats.bytes_read),
      static_cast<unsigned long long>(stored), FormatValues(read).c_str());
  return Status::OK();
}

// ---- export -----------------------------------------------------------------

// The tensors an export writes, read by batches: the tensors from the one
// asked for on, up to kBytes in all (or the one, when larger) and kTensors,
// by one load each. A load plans its reads together and reads neighbouring
// chunks with one system call; DB::Read takes a tensor at a time (20,000
// tensors of 64 B: 1.0-1.5 s by reads against 0.2-0.4 s by batches).
// Memory: a batch, or the largest tensor.
class ExportBatch {
 public:
  static constexpr uint64_t kBytes = uint64_t{64} << 20;
  static constexpr size_t kTensors = 4096;

  ExportBatch(DB& db, int64_t id, const std::vector<ExportTensor>& tensors)
      : db_(db), id_(id), tensors_(tensors) {}

  // Tensor `i`'s bytes, each handed out once (a second call reads again).
  Result<std::vector<std::byte>> Take(size_t i) {
    if (i < begin_ || i >= begin_ + data_.size() || taken_[i - begin_]) {
      CKPTDB_RETURN_IF_ERROR(LoadFrom(i));
    }
    taken_[i - begin_] = true;
    return std::move(data_[i - begin_]);
  }

 private:
  Status LoadFrom(size_t first) {
    size_t end = first;
    uint64_t bytes = 0;
    while (end < tensors_.size() && end - first < kTensors &&
           (end == first || bytes + tensors_[end].nbytes <= kBytes)) {
      bytes += tensors_[end++].nbytes;
    }
    begin_ = first;
    data_.assign(end - first, {});
    taken_.assign(end - first, false);
    // A load matches its targets by flat key: each tensor under its own.
    StateDict target;
    for (size_t i = first; i < end; ++i) {
      const ExportTensor& t = tensors_[i];
      std::vector<std::byte>& data = data_[i - first];
      data.resize(t.nbytes);
      target.Set(t.name, TensorView::Whole(data.data(), t.dtype, t.shape));
    }
    return db_.Load(target, CheckpointSelector::Id(id_), LoadOptions())
        .status();
  }

  DB& db_;
  const int64_t id_;
  const std::vector<ExportTensor>& tensors_;
  size_t begin_ = 0;
  std::vector<std::vector<std::byte>> data_;
  std::vector<bool> taken_;
};

// Whether an export's output was replaced (renamed over, or copied into).
bool export_in_place = false;

// Writes whole tensors of the selected checkpoint to `output`; `*read_id` is
// the checkpoint read.
Status ExportOnce(const std::string& path, const Selection& sel,
                  const std::string& format, const std::string& output,
                  const std::vector<std::string>& keys, int64_t* read_id) {
  CKPTDB_ASSIGN_OR_RETURN(ExportOutput out, ExportOutput::For(output, path));
  CKPTDB_ASSIGN_OR_RETURN(Opened opened, OpenCheckpoint(path, sel));
  DB& db = *opened.db;
  const CheckpointMetadata* meta = &opened.meta;
  const int64_t id = meta->info.id;
  *read_id = id;
  std::vector<const std::pair<const std::string, TensorMetadata>*> chosen;
  if (keys.empty()) {
    for (const auto& entry : meta->tensors) chosen.push_back(&entry);
  } else {
    std::set<std::string> seen;
    for (const std::string& k : keys) {
      auto it = meta->tensors.find(k);
      if (it == meta->tensors.end()) {
        return Status::NotFound(
            "no tensor '" + k + "' in checkpoint id " + std::to_string(id) +
            (meta->values.count(k) ? " (it is a small value)" : ""));
      }
      if (seen.insert(k).second) chosen.push_back(&*it);
    }
  }
  std::vector<ExportTensor> tensors;
  uint64_t total = 0;
  for (const auto* entry : chosen) {
    const TensorMetadata& t = entry->second;
    const uint64_t nbytes =
        static_cast<uint64_t>(NumElements(t.global_shape)) * DTypeSize(t.dtype);
    tensors.push_back({entry->first, t.dtype, t.global_shape, nbytes});
    total += nbytes;
  }
  Progress progress("export", total);
  // Whole tensors, each chunk read once, checksums verified, read by batches
  // of consecutive ones (ExportBatch).
  ExportBatch batch(db, id, tensors);
  TensorFiller fill = [&](size_t i) -> Result<std::vector<std::byte>> {
    if (const int signal = Interrupted()) {
      return Status::IOError("export to " + output +
                             ": interrupted by signal " +
                             std::to_string(signal));
    }
    CKPTDB_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, batch.Take(i));
    progress.Add(bytes.size());
    return bytes;
  };
  Status written;
  if (format == "safetensors") {
    std::map<std::string, std::string> metadata = meta->user_metadata;
    metadata["ckptdb.checkpoint_id"] = std::to_string(meta->info.id);
    if (meta->info.step)
      metadata["ckptdb.step"] = std::to_string(*meta->info.step);
    if (meta->info.tag) metadata["ckptdb.tag"] = *meta->info.tag;
    written = WriteSafetensors(out.path(), tensors, metadata, fill);
  } else {
    written = WriteNpz(out.path(), tensors, fill);
  }
  CKPTDB_RETURN_IF_ERROR(written);
  CKPTDB_RETURN_IF_ERROR(out.Finish());
  // The output is replaced: a signal from here on no longer stops the export.
  export_in_place = true;
  progress.Clear();
  std::fprintf(out.to_stdout() ? stderr : stdout,
               "exported %zu tensors (%s) of checkpoint %lld to %s\n",
               tensors.size(), HumanBytes(total).c_str(),
               static_cast<long long>(id), ControlEscaped(output).c_str());
  return Status::OK();
}

// Runs `once` (a command that reads the selected checkpoint and says which
// it read) and prints its error. "The latest" is whichever checkpoint is
// newest while the command runs, as for DB.load: when the store's writer
// deletes the one it reads (retention, beside a training run), the command
// starts again from the newer one, a few times at most.
template <typename Once>
int ReadingLatest(const std::string& path, const Selection& sel, Once once) {
  constexpr int kLatestAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    int64_t read_id = 0;
    const Status s = once(&read_id);
    if (s.ok()) return 0;
    if (!s.IsNotFound() || read_id == 0) return Fail(s);
    auto store = OpenStore(path);
    auto listed = store.ok()
                      ? (*store)->ListCheckpoints()
                      : Result<std::vector<CheckpointInfo>>(store.status());
    const bool deleted =
        listed.ok() &&
        std::none_of(listed->begin(), listed->end(),
                     [&](const CheckpointInfo& c) { return c.id == read_id; });
    if (!deleted) return Fail(s);
    const std::string context =
        "checkpoint id " + std::to_string(read_id) +
        " was deleted by the store's writer while it was read";
    if (sel.given() || listed->empty()) return Fail(s.WithContext(context));
    if (attempt == kLatestAttempts) {
      return Fail(s.WithContext(context + ", " + std::to_string(attempt) +
                                " times in a row"));
    }
  }
}

// What the command line asks for; each subcommand fills the fields it takes.
struct Arguments {
  std::string store, format, output, key, slice;
  bool as_json = false, chunks = false;
  bool key_given = false;  // show --key, also of the empty key
  Selection sel;
  std::vector<std::string> keys;
};

CLI::App* AddList(CLI::App& app, Arguments& a) {
  auto* list = app.add_subcommand(
      "list", "List the committed checkpoints, one line each (oldest first)");
  list->add_option("STORE", a.store, "store directory")->required();
  list->add_flag("--json", a.as_json,
                 "print a JSON array of checkpoint summaries");
  return list;
}

CLI::App* AddShow(CLI::App& app, Arguments& a) {
  auto* show = app.add_subcommand(
      "show",
      "Show one checkpoint's tensors, values and metadata (default: latest)");
  show->add_option("STORE", a.store, "store directory")->required();
  AddSelection(show, &a.sel, "(default: the latest checkpoint)");
  show->add_flag("--json", a.as_json,
                 "print the fields of the Python API's DB.metadata() as JSON");
  auto* chunks_flag = show->add_flag(
      "--chunks", a.chunks,
      "list every stored chunk (offset, shape, writer rank, size, checksum; "
      "with --json, the chunks of DB.metadata() are always listed)");
  auto* key_option = show->add_option(
      "--key", a.key,
      "print the values of this tensor (flat key), or this small value");
  show->add_option("--slice", a.slice,
                   "with --key: only these values, numpy's index syntax "
                   "(\"0:4,:\", \"-1\", \"2:10, 3\"); reads only the chunks "
                   "holding them")
      ->needs(key_option);
  key_option->excludes(chunks_flag);
  key_option->each([&a](const std::string&) { a.key_given = true; });
  return show;
}

CLI::App* AddVerify(CLI::App& app, Arguments& a) {
  auto* verify = app.add_subcommand("verify",
                                    "Read every chunk and check checksums and "
                                    "layouts (default: every checkpoint)");
  verify->add_option("STORE", a.store, "store directory")->required();
  AddSelection(verify, &a.sel, "(default: every checkpoint)");
  return verify;
}

CLI::App* AddExport(CLI::App& app, Arguments& a) {
  auto* exp = app.add_subcommand(
      "export",
      "Write whole tensors of a checkpoint to a safetensors or .npz file");
  exp->add_option("STORE", a.store, "store directory")->required();
  AddSelection(exp, &a.sel, "(default: the latest checkpoint)");
  exp->add_option(
         "--format", a.format,
         "safetensors (bfloat16 as BF16) or npz (bfloat16 as uint16 bits)")
      ->required()
      ->check(CLI::IsMember({"safetensors", "npz"}));
  exp->add_option("-o,--output", a.output,
                  "file to write (- for the standard output)")
      ->required();
  exp->add_option("--key", a.keys,
                  "flat key of a tensor to export (repeatable; default: all)");
  return exp;
}

}  // namespace
}  // namespace ckptdb::tools

namespace {

// A bad command line: one line on stderr, exit 2 (the "any other error" of
// the tool's --help).
int UsageError(const std::string& what) {
  std::fprintf(stderr, "ckpt-db-dump: %s (run with --help for usage)\n",
               ckptdb::tools::ControlEscaped(what).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ckptdb::tools;
  CLI::App app{
      "ckpt-db-dump: inspect, verify and export a ckptdb store.\n"
      "The store is opened read-only and never modified. Exit status: 0 ok, 1 "
      "damage found by\n"
      "verify, 2 any other error (no store, unknown checkpoint or key, bad "
      "arguments)."};
  app.require_subcommand(1);
  Arguments a;
  CLI::App* list = AddList(app, a);
  CLI::App* show = AddShow(app, a);
  CLI::App* verify = AddVerify(app, a);
  AddExport(app, a);
  // A first word that names no command: said so (CLI11 would say that a
  // command is required).
  const auto commands = app.get_subcommands([](CLI::App*) { return true; });
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(),
                   [&](CLI::App* c) { return c->get_name() == argv[1]; })) {
    std::string known;
    for (CLI::App* c : commands)
      known += (known.empty() ? "" : ", ") + c->get_name();
    return UsageError("unknown command '" + std::string(argv[1]) + "' (" +
                      known + ")");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints help (exit 0); a bad command line is one of the "any other
    // error" cases, on one line as the others are.
    if (e.get_exit_code() == 0) return app.exit(e);
    return UsageError(e.what());
  }
  if (*list) return List(a.store, a.as_json);
  if (*show && a.key_given) {
    return ReadingLatest(a.store, a.sel, [&](int64_t* read_id) {
      return ShowValuesOnce(a.store, a.sel, a.key, a.slice, a.as_json, read_id);
    });
  }
  if (*show) return Show(a.store, a.sel, a.as_json, a.chunks);
  if (*verify) return Verify(a.store, a.sel);
  CatchInterrupts();
  const int exported = ReadingLatest(a.store, a.sel, [&](int64_t* read_id) {
    return ExportOnce(a.store, a.sel, a.format, a.output, a.keys, read_id);
  });
  // Its files removed: ends by the signal, as it would have, unless the
  // signal came once the output was replaced (the export is whole there).
  if (const int signal = Interrupted(); signal && !export_in_place) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
  return exported;
}
