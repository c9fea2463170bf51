#include "ckptdb/box.h"

namespace ckptdb {

std::string IndexToString(const TensorIndex& index) {
  std::string out = "[";
  for (size_t d = 0; d < index.size(); ++d) {
    const IndexEntry& e = index[d];
    if (d > 0) out += ", ";
    if (e.single) {
      out += std::to_string(e.start.value_or(0));
      continue;
    }
    if (e.start) out += std::to_string(*e.start);
    out += ":";
    if (e.stop) out += std::to_string(*e.stop);
    if (e.step != 1) {
      out += ':';
      out += std::to_string(e.step);
    }
  }
  return out + "]";
}

TensorIndex IndexOfBox(const Box& box) {
  TensorIndex index;
  index.reserve(box.ndim());
  for (size_t d = 0; d < box.ndim(); ++d) {
    index.push_back(IndexEntry::Exact(box.origin[d], box.exclusive_max(d)));
  }
  return index;
}

}  // namespace ckptdb
