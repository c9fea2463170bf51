#pragma once

// `ckpt-db-dump show --key K --slice S`: the slice syntax and how the values
// read are printed.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ckptdb/box.h"
#include "ckptdb/db.h"
#include "ckptdb/status.h"

namespace ckptdb::tools {

// Parses numpy's index syntax without the brackets (which are allowed too):
// comma-separated entries, each an int ("3", "-1") or a slice ("0:4", ":",
// "-2:", "1:9:2"). "" is the whole tensor. InvalidArgument naming the text
// and the entry that is not one of these.
Result<TensorIndex> ParseSlice(std::string_view text);

// Numbers of more elements than this are summarized, numpy's way: the first
// and last kEdgeItems of each dimension around "...".
inline constexpr int64_t kSummaryThreshold = 1000;
inline constexpr int64_t kEdgeItems = 3;

// The values of `t` as numpy prints them: nested brackets, one row per line,
// floating point in the fewest digits that read back as the same value, bool as
// True/False, summarized beyond kSummaryThreshold elements.
std::string FormatValues(const Tensor& t);

// The values of `t` as nested JSON arrays (every element; bool as true/false,
// floating point as numbers, NaN and infinities as the strings "nan", "inf"
// and "-inf").
nlohmann::ordered_json ValuesJson(const Tensor& t);

}  // namespace ckptdb::tools
