#include "ckptdb/metadata.h"

namespace ckptdb {

std::string CheckpointSelector::ToString() const {
  switch (kind) {
    case Kind::kLatest:
      return "latest";
    case Kind::kStep:
      return "step " + std::to_string(number);
    case Kind::kTag:
      return "tag '" + tag + "'";
    case Kind::kId:
      return "id " + std::to_string(number);
    case Kind::kInvalid:
      return "an invalid selector (" + tag + ")";
  }
  return "a selector of unknown kind " + std::to_string(static_cast<int>(kind));
}

}  // namespace ckptdb
