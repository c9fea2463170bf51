#include "ckptdb/file_system_hooks.h"

namespace ckptdb {

const char* FileOpName(FileOp op) {
  switch (op) {
    case FileOp::kOpen:
      return "open";
    case FileOp::kRead:
      return "read";
    case FileOp::kWrite:
      return "write";
    case FileOp::kSync:
      return "sync";
    case FileOp::kSyncDir:
      return "directory sync";
    case FileOp::kClose:
      return "close";
    case FileOp::kRename:
      return "rename";
    case FileOp::kLink:
      return "link";
    case FileOp::kDelete:
      return "delete";
    case FileOp::kCreateDir:
      return "mkdir";
    case FileOp::kStat:
      return "stat";
  }
  return "?";
}

}  // namespace ckptdb
