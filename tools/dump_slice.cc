#include "dump_slice.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "ckptdb/convert.h"

namespace ckptdb::tools {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

// An int of the slice syntax ("+" allowed); nullopt when `s` is not one.
std::optional<int64_t> ParseInt(std::string_view s) {
  s = Trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || error != std::errc() || end != s.data() + s.size())
    return std::nullopt;
  return v;
}

// One entry: "3" or "start:stop[:step]" with any part empty.
Result<IndexEntry> ParseEntry(std::string_view entry, std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--slice '" + std::string(text) +
                                   "': entry '" + std::string(Trim(entry)) +
                                   "' " + why);
  };
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t colon = entry.find(':', at);
    parts.push_back(entry.substr(at, colon - at));
    if (colon == std::string_view::npos) break;
    at = colon + 1;
  }
  if (parts.size() > 3) return bad("has more than two ':'");
  std::optional<int64_t> values[3];
  for (size_t i = 0; i < parts.size(); ++i) {
    if (Trim(parts[i]).empty()) {
      if (parts.size() == 1) return bad("is empty");
      continue;
    }
    values[i] = ParseInt(parts[i]);
    if (!values[i]) return bad("is not an int or start:stop[:step]");
  }
  if (parts.size() == 1) return IndexEntry::At(*values[0]);
  return IndexEntry::Range(values[0], values[1], values[2].value_or(1));
}

// The elements of `t` converted for printing: bool, int64 or double.
struct Elements {
  // kUInt: uint64 values, whose bits `ints` holds.
  enum class Kind { kBool, kInt, kUInt, kFloat } kind;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  // The tensor, whose bytes the shortest text of a float must give back.
  const Tensor* tensor = nullptr;
};

Elements Convert(const Tensor& t) {
  Elements e;
  e.tensor = &t;
  const size_t n = static_cast<size_t>(NumElements(t.shape));
  if (t.dtype == DType::kBool) {
    e.kind = Elements::Kind::kBool;
    for (size_t i = 0; i < n; ++i)
      e.ints.push_back(t.data[i] != std::byte{0} ? 1 : 0);
  } else if (t.dtype == DType::kFloat64 || t.dtype == DType::kFloat32 ||
             t.dtype == DType::kFloat16 || t.dtype == DType::kBFloat16 ||
             t.dtype == DType::kFloat8E4M3FN || t.dtype == DType::kFloat8E5M2) {
    e.kind = Elements::Kind::kFloat;
    e.floats.resize(n);
    ConvertElements(t.data.data(), t.dtype, e.floats.data(), DType::kFloat64,
                    n);
  } else {
    e.kind = t.dtype == DType::kUInt64 ? Elements::Kind::kUInt
                                       : Elements::Kind::kInt;
    e.ints.resize(n);
    ConvertElements(t.data.data(), t.dtype, e.ints.data(), DType::kInt64, n);
  }
  return e;
}

// `v` printed with `format` at `precision` ("%.*g", "%.*e", "%.*f").
std::string Printed(const char* format, int precision, double v) {
  char out[400];  // "%.*f" of up to 1e16 with its digits
  std::snprintf(out, sizeof(out), format, precision, v);
  return out;
}

// Whether `text` reads back as the element of `dtype` at `stored`.
bool ReadsBack(const std::string& text, DType dtype, const std::byte* stored) {
  const double parsed = std::strtod(text.c_str(), nullptr);
  std::byte back[8];
  ConvertElements(&parsed, DType::kFloat64, back, dtype, 1);
  return std::memcmp(back, stored, DTypeSize(dtype)) == 0;
}

// The shortest text of `v` that reads back as the same element of `dtype`
// (the bytes at `stored`), as numpy prints floats: positional from 1e-4 up
// to 1e16, scientific beyond, and always with a point ("100.", "1.e+20"), so
// that a float never reads as an int.
std::string ShortestText(double v, DType dtype, const std::byte* stored) {
  int digits = 1;
  while (digits < 17 && !ReadsBack(Printed("%.*g", digits, v), dtype, stored))
    ++digits;
  std::string text = Printed("%.*g", digits, v);
  const double a = std::fabs(v);
  if (a == 0 || (a >= 1e-4 && a < 1e16)) {
    // The exponent of the rounded digits (0.00999... at one digit is 1e-02).
    const std::string scientific = Printed("%.*e", digits - 1, v);
    const int exponent =
        std::atoi(scientific.c_str() + scientific.find('e') + 1);
    std::string fixed = Printed("%.*f", std::max(0, digits - 1 - exponent), v);
    if (ReadsBack(fixed, dtype, stored)) text = std::move(fixed);
  }
  if (text.find('.') != std::string::npos) return text;
  const size_t e = std::min(text.find('e'), text.size());
  return text.substr(0, e) + "." + text.substr(e);
}

std::string ElementText(const Elements& e, size_t i) {
  if (e.kind == Elements::Kind::kBool) return e.ints[i] ? "True" : "False";
  if (e.kind == Elements::Kind::kInt) return std::to_string(e.ints[i]);
  if (e.kind == Elements::Kind::kUInt)
    return std::to_string(static_cast<uint64_t>(e.ints[i]));
  const double v = e.floats[i];
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return ShortestText(v, e.tensor->dtype,
                      e.tensor->data.data() + i * DTypeSize(e.tensor->dtype));
}

// Prints the sub-array at dimension `dim` starting at element `base`.
void FormatDim(const Elements& e, const Shape& shape, size_t dim, int64_t base,
               bool summarize, std::string* out) {
  if (dim == shape.size()) {
    *out += ElementText(e, static_cast<size_t>(base));
    return;
  }
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  const std::string separator =
      dim + 1 == shape.size() ? ", " : ",\n" + std::string(dim + 1, ' ');
  *out += "[";
  const int64_t n = shape[dim];
  const bool cut = summarize && n > 2 * kEdgeItems;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      *out += "..." + separator;
      i = n - kEdgeItems;
    }
    FormatDim(e, shape, dim + 1, base + i * stride, summarize, out);
    if (i + 1 < n) *out += separator;
  }
  *out += "]";
}

nlohmann::ordered_json ElementJson(const Elements& e, size_t i) {
  if (e.kind == Elements::Kind::kBool) return e.ints[i] != 0;
  if (e.kind == Elements::Kind::kInt) return e.ints[i];
  if (e.kind == Elements::Kind::kUInt) return static_cast<uint64_t>(e.ints[i]);
  const double v = e.floats[i];
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

nlohmann::ordered_json DimJson(const Elements& e, const Shape& shape,
                               size_t dim, int64_t base) {
  if (dim == shape.size()) return ElementJson(e, static_cast<size_t>(base));
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < shape[dim]; ++i)
    out.push_back(DimJson(e, shape, dim + 1, base + i * stride));
  return out;
}

}  // namespace

Result<TensorIndex> ParseSlice(std::string_view text) {
  std::string_view body = Trim(text);
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']') {
    body = Trim(body.substr(1, body.size() - 2));
  }
  TensorIndex index;
  if (body.empty()) return index;
  // One trailing comma after an entry, as numpy's a[1:2,] takes it.
  if (body.size() >= 2 && body.back() == ',')
    body = Trim(body.substr(0, body.size() - 1));
  for (size_t at = 0;;) {
    const size_t comma = body.find(',', at);
    CKPTDB_ASSIGN_OR_RETURN(IndexEntry entry,
                            ParseEntry(body.substr(at, comma - at), text));
    index.push_back(entry);
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return index;
}

std::string FormatValues(const Tensor& t) {
  const Elements e = Convert(t);
  std::string out;
  FormatDim(e, t.shape, 0, 0, NumElements(t.shape) > kSummaryThreshold, &out);
  return out;
}

nlohmann::ordered_json ValuesJson(const Tensor& t) {
  return DimJson(Convert(t), t.shape, 0, 0);
}

}  // namespace ckptdb::tools
