#include "ckptdb/db.h"

namespace ckptdb {

const char* Version() { return CKPTDB_VERSION; }

}  // namespace ckptdb
