#include "planner/retention.h"

#include <algorithm>

namespace ckptdb::planner {

std::vector<int64_t> CheckpointsToDelete(
    const std::vector<CheckpointInfo>& checkpoints,
    const RetentionPolicy& policy) {
  CKPTDB_REQUIRE(!policy.keep_last || *policy.keep_last >= 1);
  CKPTDB_REQUIRE(!policy.keep_every_steps || *policy.keep_every_steps >= 1);
  if (!policy.keep_last) return {};
  std::vector<const CheckpointInfo*> by_age;
  for (const CheckpointInfo& c : checkpoints) by_age.push_back(&c);
  std::sort(by_age.begin(), by_age.end(),
            [](const auto* a, const auto* b) { return a->id < b->id; });
  const size_t keep = static_cast<size_t>(*policy.keep_last);
  std::vector<int64_t> doomed;
  for (size_t i = 0; i + keep < by_age.size(); ++i) {
    const CheckpointInfo& c = *by_age[i];
    const bool periodic = policy.keep_every_steps && c.step &&
                          *c.step % *policy.keep_every_steps == 0;
    if (!c.tag && !periodic) doomed.push_back(c.id);
  }
  return doomed;
}

}  // namespace ckptdb::planner
