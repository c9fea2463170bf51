// What the commands of ckpt-db-dump share: exit codes, the checkpoint
// selection options, the read-only open, printing of sizes and times, a
// progress line, and the JSON forms of the Python API's results.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ckptdb/db.h"

namespace ckptdb::tools {

using json = nlohmann::ordered_json;

// Exit codes: 0 fine, 1 damage found by verify, 2 any other error.
constexpr int kDamaged = 1;
constexpr int kError = 2;

// Prints `s` on stderr; kError.
int Fail(const Status& s);

// The checkpoint a command's --step, --tag or --id selects.
struct Selection {
  std::optional<int64_t> step, id;
  std::optional<std::string> tag;
  bool given() const { return step || id || tag; }
  CheckpointSelector selector() const {
    if (step) return CheckpointSelector::Step(*step);
    if (tag) return CheckpointSelector::Tag(*tag);
    if (id) return CheckpointSelector::Id(*id);
    return CheckpointSelector::Latest();
  }
};

// Adds --step, --tag and --id (one at most) to `cmd`; `what` says the default.
void AddSelection(CLI::App* cmd, Selection* sel, const char* what);

// The store, read-only: opening it never modifies it.
Result<std::unique_ptr<DB>> OpenStore(const std::string& path);

// A read-only store and the metadata of the selected checkpoint.
struct Opened {
  std::unique_ptr<DB> db;
  CheckpointMetadata meta;
};
Result<Opened> OpenCheckpoint(const std::string& path, const Selection& sel);

// "1.5 MiB".
std::string HumanBytes(double bytes);
// "2026-12-02 21:03:00" in local time.
std::string LocalTime(double unix_seconds);

// A progress line on stderr when it is a terminal; silent otherwise.
class Progress {
 public:
  Progress(const char* verb, uint64_t total_bytes)
      : verb_(verb), total_(total_bytes), on_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { Clear(); }
  // Removes the line, so that what is printed next starts a line of its own.
  void Clear() {
    if (on_ && shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }
  void Add(uint64_t bytes) { Set(done_ + bytes, total_); }
  void Set(uint64_t done, uint64_t total) {
    done_ = done;
    total_ = total;
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (shown_ && now - last_ < std::chrono::milliseconds(100) &&
        done_ < total_)
      return;
    last_ = now;
    shown_ = true;
    std::fprintf(stderr, "\r%s: %s of %s (%.0f%%)\033[K", verb_,
                 HumanBytes(done_).c_str(), HumanBytes(total_).c_str(),
                 total_ ? 100.0 * done_ / total_ : 100.0);
  }

 private:
  const char* verb_;
  uint64_t total_, done_ = 0;
  bool on_, shown_ = false;
  std::chrono::steady_clock::time_point last_;
};

// `j` as text, as json::dump(indent) writes it, except that a number that is
// not finite is NaN, Infinity or -Infinity, as Python's json module writes and
// reads them (dump writes null, which reads back as None: a small value of
// inf would not match DB.metadata()).
std::string JsonText(const json& j, int indent = -1);

// `text` with each control character (a NUL, a newline) written as \xNN and
// each backslash as \\, for text output (a key, a tag, an error message on
// one line).
// Bytes that are not UTF-8, and C1 controls (U+0080 to U+009F), are written
// as \xNN too.
std::string ControlEscaped(const std::string& text);
// A checkpoint's tag as a text column shows it: "-" for none; the tag
// ControlEscaped, in double quotes (a quote in it as \") where it could be
// read as none or as two columns: empty, "-", holding a space, or starting
// with a quote.
std::string TagCell(const std::optional<std::string>& tag);
// The columns a terminal gives printable UTF-8 `text` (ControlEscaped's):
// 2 for each East Asian wide or fullwidth character and emoji, 0 for each
// combining mark and zero-width character, 1 for any other.
size_t DisplayWidth(std::string_view text);
// `text` followed by the spaces that make it `width` columns wide (none when
// it is as wide or wider): printf's %-*s pads by bytes instead.
std::string PadToWidth(const std::string& text, size_t width);
// A bytes value as Python writes one: b'ab\x00\''.
std::string BytesText(const Bytes& bytes);

// A small value as JSON (bytes as an array of byte values), and as one line
// of text.
json ValueJson(const Value& v);
std::string ValueText(const Value& v);
// The fields of a CheckpointInfo, as the Python API names them.
json InfoJson(const CheckpointInfo& info);
// The fields of DB.metadata() in the Python API.
json MetadataJson(const CheckpointMetadata& m);

// The commands' own parts outside ckpt_db_dump.cc.
int Verify(const std::string& path, const Selection& sel);

}  // namespace ckptdb::tools
