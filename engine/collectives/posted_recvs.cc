// The default two-step exchange of Communicator: receives kept until the
// exchange that makes them.
#include <memory>
#include <vector>

#include "ckptdb/communicator.h"

namespace ckptdb {
namespace {

class DeferredRecvs : public PostedRecvs {
 public:
  explicit DeferredRecvs(std::span<const RecvBuffer> recvs)
      : recvs(recvs.begin(), recvs.end()) {}
  const std::vector<RecvBuffer> recvs;
};

}  // namespace

Result<std::unique_ptr<PostedRecvs>> Communicator::PostRecvs(
    std::span<const RecvBuffer> recvs) {
  return std::unique_ptr<PostedRecvs>(std::make_unique<DeferredRecvs>(recvs));
}

Status Communicator::ExchangePosted(std::span<const SendBuffer> sends,
                                    std::unique_ptr<PostedRecvs> posted) {
  if (posted == nullptr) return Exchange(sends, {});
  const auto* deferred = dynamic_cast<const DeferredRecvs*>(posted.get());
  if (deferred == nullptr) {
    return Status::Internal(
        "exchange given receives posted through another communicator");
  }
  return Exchange(sends, deferred->recvs);
}

}  // namespace ckptdb
