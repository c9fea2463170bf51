#pragma once

#include <string>
#include <string_view>

namespace ckptdb {

// The name an error gives what it is about ("tensor 'w'"), joined only when
// an error is built: decoding a checkpoint of 10,000 tensors, or checking a
// state dict of them, names each of them, and a name joined up front is an
// allocation a tensor. Views its
// parts: they must outlive it. Converts from a whole name.
struct ErrorName {
  std::string_view prefix, middle, suffix;

  ErrorName(std::string_view prefix, std::string_view middle,
            std::string_view suffix)
      : prefix(prefix), middle(middle), suffix(suffix) {}
  ErrorName(const std::string& name) : prefix(name) {}  // NOLINT: a name
  ErrorName(const char* name) : prefix(name) {}         // NOLINT: a name

  bool empty() const {
    return prefix.empty() && middle.empty() && suffix.empty();
  }
  std::string str() const {
    std::string out;
    out.reserve(prefix.size() + middle.size() + suffix.size());
    return out.append(prefix).append(middle).append(suffix);
  }
  friend std::string operator+(const ErrorName& name, std::string_view text) {
    return name.str().append(text);
  }
  friend std::string operator+(std::string_view text, const ErrorName& name) {
    return std::string(text).append(name.str());
  }
};

// "tensor '<key>'".
inline ErrorName TensorName(std::string_view key) {
  return {"tensor '", key, "'"};
}

}  // namespace ckptdb
