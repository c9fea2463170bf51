#include "engine/collectives/sealed_communicator.h"

#include <xxhash.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/little_endian.h"

namespace ckptdb::engine {

void Seal(std::string* message) {
  PutLittleEndian<uint64_t>(message,
                            XXH3_64bits(message->data(), message->size()));
}

Status Unseal(std::string* message, int from) {
  constexpr size_t kSeal = sizeof(uint64_t);
  if (message->size() >= kSeal) {
    const size_t n = message->size() - kSeal;
    if (GetLittleEndian<uint64_t>(message->data() + n) ==
        XXH3_64bits(message->data(), n)) {
      message->resize(n);
      return Status::OK();
    }
  }
  return Status::IOError("a message from rank " + std::to_string(from) +
                         " arrived damaged (its checksum differs from the "
                         "one the rank sent): the communicator or the network "
                         "altered it");
}

namespace {

class Sealed : public Communicator {
 public:
  explicit Sealed(std::shared_ptr<Communicator> inner)
      : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status Barrier() override { return inner_->Barrier(); }
  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    std::string sealed(bytes);
    Seal(&sealed);
    CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                            inner_->AllGather(sealed));
    for (size_t r = 0; r < parts.size(); ++r)
      CKPTDB_RETURN_IF_ERROR(Unseal(&parts[r], static_cast<int>(r)));
    return parts;
  }
  Status Broadcast(std::string* bytes, int root) override {
    if (rank() == root) Seal(bytes);
    CKPTDB_RETURN_IF_ERROR(inner_->Broadcast(bytes, root));
    return Unseal(bytes, root);
  }
  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    return inner_->Exchange(sends, recvs);
  }
  Result<std::unique_ptr<PostedRecvs>> PostRecvs(
      std::span<const RecvBuffer> recvs) override {
    return inner_->PostRecvs(recvs);
  }
  Status ExchangePosted(std::span<const SendBuffer> sends,
                        std::unique_ptr<PostedRecvs> posted) override {
    return inner_->ExchangePosted(sends, std::move(posted));
  }
  Status CheckBackgroundUse() const override {
    return inner_->CheckBackgroundUse();
  }

 private:
  std::shared_ptr<Communicator> inner_;
};

}  // namespace

std::shared_ptr<Communicator> SealedCommunicator(
    std::shared_ptr<Communicator> inner) {
  return std::make_shared<Sealed>(std::move(inner));
}

}  // namespace ckptdb::engine
