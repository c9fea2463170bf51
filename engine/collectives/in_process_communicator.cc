#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "ckptdb/communicator.h"

namespace ckptdb {
namespace {

// State shared by the ranks of one in-process group.
class Group {
 public:
  explicit Group(int size)
      : size_(size), slots_(size), mailboxes_(size * size), pending_(size, 0) {}

  int size() const { return size_; }

  // A reusable barrier (generation counting).
  void Barrier() {
    std::unique_lock lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }

  std::vector<std::string> AllGather(int rank, std::string_view bytes) {
    {
      std::lock_guard lock(mu_);
      slots_[rank].assign(bytes);
    }
    Barrier();
    std::vector<std::string> out;
    {
      std::lock_guard lock(mu_);
      out = slots_;
    }
    Barrier();  // nobody overwrites a slot before everyone has read it
    return out;
  }

  void Broadcast(int rank, std::string* bytes, int root) {
    if (rank == root) {
      std::lock_guard lock(mu_);
      slots_[root] = *bytes;
    }
    Barrier();
    if (rank != root) {
      std::lock_guard lock(mu_);
      *bytes = slots_[root];
    }
    Barrier();
  }

  // Offers a buffer to `to`; it stays the sender's until WaitConsumed returns.
  void Post(int from, int to, const void* data, size_t nbytes) {
    std::lock_guard lock(mu_);
    mailboxes_[from * size_ + to].push_back(
        {static_cast<const char*>(data), nbytes});
    ++pending_[from];
    cv_.notify_all();
  }

  // Copies the next buffer `from` offered to `to` straight from the sender's
  // memory.
  Status Take(int from, int to, void* data, size_t nbytes) {
    std::unique_lock lock(mu_);
    auto& box = mailboxes_[from * size_ + to];
    cv_.wait(lock, [&] { return !box.empty(); });
    const Message message = box.front();
    box.pop_front();
    Status status;
    if (message.nbytes != nbytes) {
      status = Status::Internal("rank " + std::to_string(to) + " expected " +
                                std::to_string(nbytes) + " bytes from rank " +
                                std::to_string(from) + ", got " +
                                std::to_string(message.nbytes));
    } else if (nbytes) {
      lock.unlock();  // the sender's buffer is stable until it is consumed
      std::memcpy(data, message.data, nbytes);
      lock.lock();
    }
    --pending_[from];
    cv_.notify_all();
    return status;
  }

  // Returns once every buffer `from` posted has been taken.
  void WaitConsumed(int from) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_[from] == 0; });
  }

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::string> slots_;
  struct Message {
    const char* data;
    size_t nbytes;
  };
  // Buffers offered and not yet taken, [from * size + to], in send order.
  std::vector<std::deque<Message>> mailboxes_;
  std::vector<int64_t> pending_;  // per sender: posted and not yet taken
};

class InProcess : public Communicator {
 public:
  InProcess(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Status Barrier() override {
    group_->Barrier();
    return Status::OK();
  }
  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    return group_->AllGather(rank_, bytes);
  }
  Status Broadcast(std::string* bytes, int root) override {
    if (root < 0 || root >= size())
      return Status::InvalidArgument("broadcast root " + std::to_string(root));
    group_->Broadcast(rank_, bytes, root);
    return Status::OK();
  }
  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    for (const SendBuffer& s : sends) {
      if (s.peer < 0 || s.peer >= size()) {
        return Status::Internal("send to rank " + std::to_string(s.peer));
      }
    }
    for (const RecvBuffer& r : recvs) {
      if (r.peer < 0 || r.peer >= size()) {
        return Status::Internal("receive from rank " + std::to_string(r.peer));
      }
    }
    for (const SendBuffer& s : sends)
      group_->Post(rank_, s.peer, s.data, s.nbytes);
    Status status;
    for (const RecvBuffer& r : recvs) {
      Status taken = group_->Take(r.peer, rank_, r.data, r.nbytes);
      if (status.ok()) status = taken;
    }
    // Our buffers stay valid until every peer has copied them.
    group_->WaitConsumed(rank_);
    return status;
  }

 private:
  std::shared_ptr<Group> group_;
  const int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> InProcessCommunicators(int size) {
  auto group = std::make_shared<Group>(size);
  std::vector<std::shared_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_shared<InProcess>(group, r));
  return out;
}

}  // namespace ckptdb
