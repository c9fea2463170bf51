#include <cstring>

#include "ckptdb/communicator.h"

namespace ckptdb {
namespace {

class SingleProcess : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status Barrier() override { return Status::OK(); }
  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    return std::vector<std::string>{std::string(bytes)};
  }
  Status Broadcast(std::string*, int root) override {
    if (root != 0)
      return Status::InvalidArgument("broadcast root " + std::to_string(root) +
                                     " of 1 rank");
    return Status::OK();
  }
  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    if (sends.size() != recvs.size()) {
      return Status::Internal(
          "single-process exchange with unmatched sends and receives");
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      if (sends[i].peer != 0 || recvs[i].peer != 0 ||
          sends[i].nbytes != recvs[i].nbytes) {
        return Status::Internal(
            "single-process exchange with a peer other than rank 0");
      }
      if (sends[i].nbytes)
        std::memcpy(recvs[i].data, sends[i].data, sends[i].nbytes);
    }
    return Status::OK();
  }
};

}  // namespace

std::shared_ptr<Communicator> SingleProcessCommunicator() {
  return std::make_shared<SingleProcess>();
}

}  // namespace ckptdb
