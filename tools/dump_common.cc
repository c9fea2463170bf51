#include "dump_common.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <type_traits>
#include <variant>
#include <vector>

namespace ckptdb::tools {
namespace {

// The flat mapping as DB.metadata() gives it: int keys and list and tuple
// indexes as JSON numbers.
json FlatMappingJson(const CheckpointMetadata& m) {
  json out = json::object();
  for (const auto& [key, path] : m.flat_mapping) {
    auto kinds = m.path_kinds.find(key);
    json parts = json::array();
    for (size_t i = 0; i < path.size(); ++i) {
      const bool is_int = kinds != m.path_kinds.end() &&
                          kinds->second[i] != PathPartKind::kStrKey;
      parts.push_back(is_int ? json(std::stoll(path[i])) : json(path[i]));
    }
    out[key] = std::move(parts);
  }
  return out;
}

}  // namespace

int Fail(const Status& s) {
  // One line, whatever the message quotes (a key or tag given on the command
  // line, a path).
  std::fprintf(stderr, "ckpt-db-dump: %s\n",
               ControlEscaped(s.message()).c_str());
  return kError;
}

namespace {

// CLI11 turns an integer beyond int64 into the nearest bound, which would
// then select a checkpoint the user never named: refused instead. Text that
// is no integer at all is left to CLI11's own conversion error.
CLI::Validator Int64InRange() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        const auto [end, error] =
            std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc::result_out_of_range)
          return "'" + text + "' does not fit in a 64-bit signed integer";
        return std::string();
      },
      "INT64");
}

}  // namespace

void AddSelection(CLI::App* cmd, Selection* sel, const char* what) {
  auto* step = cmd->add_option("--step", sel->step,
                               std::string("select the checkpoint of this "
                                           "training step ") +
                                   what)
                   ->check(Int64InRange());
  auto* tag =
      cmd->add_option("--tag", sel->tag, "select the checkpoint with this tag");
  auto* id =
      cmd->add_option("--id", sel->id, "select the checkpoint with this id")
          ->check(Int64InRange());
  step->excludes(tag)->excludes(id);
  tag->excludes(id);
}

Result<std::unique_ptr<DB>> OpenStore(const std::string& path) {
  Options options;
  options.create_if_missing = false;
  options.read_only = true;
  return DB::Open(options, path);
}

Result<Opened> OpenCheckpoint(const std::string& path, const Selection& sel) {
  Opened out;
  CKPTDB_ASSIGN_OR_RETURN(out.db, OpenStore(path));
  CKPTDB_ASSIGN_OR_RETURN(out.meta, out.db->GetMetadata(sel.selector()));
  return out;
}

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof(out), u == 0 ? "%.0f %s" : "%.1f %s", bytes,
                units[u]);
  return out;
}

std::string LocalTime(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%d %H:%M:%S", &tm);
  return out;
}

json ValueJson(const Value& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Bytes>) {
          // JSON has no bytes: an array of byte values.
          return json(std::vector<uint8_t>(x.data.begin(), x.data.end()));
        } else if constexpr (std::is_same_v<T, None>) {
          return json(nullptr);
        } else if constexpr (std::is_same_v<T, BigInt>) {
          // Beyond what JSON readers hold exactly as a number: its digits.
          return json(x.digits);
        } else {
          return json(x);
        }
      },
      v);
}

namespace {

// A string, number or literal as JSON; bytes that are not UTF-8 (text a
// store written before saves checked it may hold) become U+FFFD.
std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void AppendJson(const json& j, int indent, int depth, std::string* out) {
  const auto newline = [&](int level) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent * level), ' ');
  };
  if (j.is_object() || j.is_array()) {
    const bool object = j.is_object();
    if (j.empty()) {
      *out += object ? "{}" : "[]";
      return;
    }
    *out += object ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) *out += ",";
      first = false;
      newline(depth + 1);
      if (object) {
        *out += Dump(json(it.key()));
        *out += indent < 0 ? ":" : ": ";
      }
      AppendJson(*it, indent, depth + 1, out);
    }
    newline(depth);
    *out += object ? '}' : ']';
    return;
  }
  if (j.is_number_float() && !std::isfinite(j.get<double>())) {
    const double v = j.get<double>();
    *out += std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
    return;
  }
  *out += Dump(j);
}

}  // namespace

std::string JsonText(const json& j, int indent) {
  std::string out;
  AppendJson(j, indent, 0, &out);
  return out;
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (1 to 4),
// or 0 when its first byte starts none.
size_t Utf8Length(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b = byte(0);
  if (b < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (b >= 0xc2 && b <= 0xdf) {
    n = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    n = 3;
    if (b == 0xe0) lo = 0xa0;
    if (b == 0xed) hi = 0x9f;  // no surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4;
    if (b == 0xf0) lo = 0x90;
    if (b == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return n;
}

void AppendHexEscape(unsigned char b, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  *out += "\\x";
  *out += kHex[b >> 4];
  *out += kHex[b & 15];
}

}  // namespace

std::string TagCell(const std::optional<std::string>& tag) {
  if (!tag) return "-";
  const std::string shown = ControlEscaped(*tag);
  const bool ambiguous = shown.empty() || shown == "-" ||
                         shown.find(' ') != std::string::npos ||
                         shown.front() == '"';
  if (!ambiguous) return shown;
  std::string quoted = "\"";
  for (const char c : shown) {
    if (c == '"') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string ControlEscaped(const std::string& text) {
  std::string out;
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto b = static_cast<unsigned char>(rest[0]);
    const size_t n = Utf8Length(rest);
    // C1 controls (U+0080 to U+009F: 0xc2 0x80 to 0xc2 0x9f) act on some
    // terminals as ESC does.
    const bool c1 =
        n == 2 && b == 0xc2 && static_cast<unsigned char>(rest[1]) < 0xa0;
    if (b == '\\') {
      out += "\\\\";  // so that a written \x0a is not a newline
    } else if (n == 0 || b < 0x20 || b == 0x7f) {
      AppendHexEscape(b, &out);  // a control, or a byte of no character
    } else if (c1) {
      AppendHexEscape(b, &out);
      AppendHexEscape(static_cast<unsigned char>(rest[1]), &out);
    } else {
      out.append(rest.substr(0, n));
    }
    rest.remove_prefix(n == 0 ? 1 : n);
  }
  return out;
}

namespace {

// The code point of the well-formed UTF-8 sequence of `n` bytes at `s`.
char32_t CodePoint(std::string_view s, size_t n) {
  static constexpr unsigned char kLead[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
  char32_t c = static_cast<unsigned char>(s[0]) & kLead[n];
  for (size_t i = 1; i < n; ++i)
    c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3f);
  return c;
}

// Columns of code point `c` (wcwidth's rules for the common ranges, without
// the process's locale, which a tool run from a script may lack).
size_t CodePointWidth(char32_t c) {
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kZero[] = {
      {0x0300, 0x036f}, {0x0483, 0x0489}, {0x0591, 0x05bd}, {0x0610, 0x061a},
      {0x064b, 0x065f}, {0x0e31, 0x0e31}, {0x0e34, 0x0e3a}, {0x1ab0, 0x1aff},
      {0x1dc0, 0x1dff}, {0x200b, 0x200f}, {0x20d0, 0x20ff}, {0xfe00, 0xfe0f},
      {0xfe20, 0xfe2f}, {0xfeff, 0xfeff}};
  static constexpr Range kWide[] = {
      {0x1100, 0x115f},   {0x2e80, 0x303e},  {0x3041, 0x33ff},
      {0x3400, 0x4dbf},   {0x4e00, 0x9fff},  {0xa000, 0xa4cf},
      {0xac00, 0xd7a3},   {0xf900, 0xfaff},  {0xfe30, 0xfe4f},
      {0xff00, 0xff60},   {0xffe0, 0xffe6},  {0x1f300, 0x1f64f},
      {0x1f900, 0x1f9ff}, {0x20000, 0x3fffd}};
  auto in = [c](const auto& ranges) {
    for (const Range& r : ranges) {
      if (c >= r.first && c <= r.last) return true;
    }
    return false;
  };
  if (in(kZero)) return 0;
  return in(kWide) ? 2 : 1;
}

}  // namespace

size_t DisplayWidth(std::string_view text) {
  size_t width = 0;
  while (!text.empty()) {
    const size_t n = Utf8Length(text);
    width += n == 0 ? 1 : CodePointWidth(CodePoint(text, n));
    text.remove_prefix(n == 0 ? 1 : n);
  }
  return width;
}

std::string PadToWidth(const std::string& text, size_t width) {
  const size_t has = DisplayWidth(text);
  return has >= width ? text : text + std::string(width - has, ' ');
}

std::string BytesText(const Bytes& bytes) {
  std::string out = "b'";
  for (const char x : bytes.data) {
    const auto b = static_cast<unsigned char>(x);
    if (b == '\\' || b == '\'') {
      out += '\\';
      out += static_cast<char>(b);
    } else if (b >= 0x20 && b < 0x7f) {
      out += static_cast<char>(b);
    } else {
      AppendHexEscape(b, &out);
    }
  }
  return out + "'";
}

std::string ValueText(const Value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return Dump(json(*s));
  if (const auto* b = std::get_if<Bytes>(&v))
    return "bytes[" + std::to_string(b->data.size()) + "]";
  if (const auto* big = std::get_if<BigInt>(&v)) return big->digits;
  return JsonText(ValueJson(v));
}

json InfoJson(const CheckpointInfo& info) {
  return {{"id", info.id},
          {"step", info.step ? json(*info.step) : json(nullptr)},
          {"tag", info.tag ? json(*info.tag) : json(nullptr)},
          {"created", info.created},
          {"world_size", info.world_size},
          {"num_tensors", info.num_tensors},
          {"nbytes", info.nbytes},
          {"nbytes_written", info.nbytes_written},
          {"references", info.references},
          {"damage", info.damage.empty() ? json(nullptr) : json(info.damage)}};
}

json MetadataJson(const CheckpointMetadata& m) {
  json tensors = json::object();
  for (const auto& [key, t] : m.tensors) {
    json chunks = json::array();
    for (const ChunkMetadata& c : t.chunks) {
      chunks.push_back({{"global_offset", c.box.origin},
                        {"local_shape", c.box.shape},
                        {"rank", c.writer_rank},
                        {"nbytes", c.nbytes}});
    }
    tensors[key] = {{"dtype", std::string(DTypeName(t.dtype))},
                    {"global_shape", t.global_shape},
                    {"chunks", chunks}};
  }
  json values = json::object();
  for (const auto& [key, v] : m.values) values[key] = ValueJson(v);
  return {{"id", m.info.id},
          {"step", m.info.step ? json(*m.info.step) : json(nullptr)},
          {"tag", m.info.tag ? json(*m.info.tag) : json(nullptr)},
          {"created", m.info.created},
          {"world_size", m.info.world_size},
          {"tensors", tensors},
          {"flat_mapping", FlatMappingJson(m)},
          {"values", values},
          {"user_metadata", m.user_metadata}};
}

}  // namespace ckptdb::tools
