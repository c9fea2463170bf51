// The MPI communicator: byte collectives and point-to-point transfers over a
// duplicate of the caller's MPI_Comm, errors returned as Status (never abort).
#include "engine/collectives/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <vector>

namespace ckptdb {
namespace engine {
namespace {

Status FromMpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::OK();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::IOError(
      std::string("MPI ").append(what).append(" failed: ").append(text, len));
}

class Mpi : public Communicator {
 public:
  Mpi(MPI_Comm comm, size_t max_message)
      : comm_(comm), max_message_(max_message) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  Status CheckBackgroundUse() const override {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level == MPI_THREAD_MULTIPLE) return Status::OK();
    const char* names[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED",
                           "MPI_THREAD_SERIALIZED"};
    const bool known =
        level >= MPI_THREAD_SINGLE && level < MPI_THREAD_MULTIPLE;
    return Status::FailedPrecondition(
        std::string("an asynchronous save commits from a background thread, "
                    "which needs MPI initialized with MPI_THREAD_MULTIPLE; "
                    "this process has ") +
        (known ? names[level - MPI_THREAD_SINGLE] : "another level") +
        " (call MPI_Init_thread with MPI_THREAD_MULTIPLE; mpi4py does by "
        "default)");
  }

  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Barrier() override { return FromMpi(MPI_Barrier(comm_), "barrier"); }

  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    const uint64_t mine = bytes.size();
    std::vector<uint64_t> sizes(size_);
    CKPTDB_RETURN_IF_ERROR(
        FromMpi(MPI_Allgather(&mine, 1, MPI_UINT64_T, sizes.data(), 1,
                              MPI_UINT64_T, comm_),
                "all-gather of sizes"));
    uint64_t total = 0;
    for (uint64_t s : sizes) total += s;
    std::vector<std::string> out(size_);
    if (total <= std::min<uint64_t>(max_message_, INT_MAX)) {
      std::vector<int> counts(size_), displs(size_);
      for (int r = 0, at = 0; r < size_; ++r) {
        counts[r] = static_cast<int>(sizes[r]);
        displs[r] = at;
        at += counts[r];
      }
      std::string flat(total, '\0');
      CKPTDB_RETURN_IF_ERROR(
          FromMpi(MPI_Allgatherv(bytes.data(), static_cast<int>(mine), MPI_BYTE,
                                 flat.data(), counts.data(), displs.data(),
                                 MPI_BYTE, comm_),
                  "all-gather"));
      for (int r = 0; r < size_; ++r) out[r].assign(flat, displs[r], sizes[r]);
      return out;
    }
    // Larger than one message: one piecewise broadcast per rank.
    for (int r = 0; r < size_; ++r) {
      out[r].resize(sizes[r]);
      if (r == rank_) out[r].assign(bytes);
      CKPTDB_RETURN_IF_ERROR(BroadcastBuffer(out[r].data(), sizes[r], r));
    }
    return out;
  }

  Status Broadcast(std::string* bytes, int root) override {
    uint64_t n = bytes->size();
    CKPTDB_RETURN_IF_ERROR(FromMpi(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_),
                                   "broadcast of size"));
    bytes->resize(n);
    return BroadcastBuffer(bytes->data(), n, root);
  }

  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    std::vector<MPI_Request> requests;
    Status posted = Post(sends, recvs, &requests);
    // Complete whatever was posted, even after an error, so that no request
    // outlives its buffer.
    // Polled: for a short while at full speed (a peer that is running answers
    // within microseconds), then with short sleeps, so that the load's reader
    // threads keep the cores while this rank waits for a slow peer. (A yield
    // would queue this thread behind every busy process on the core; a
    // thread waking from a sleep runs at once.)
    Status done;
    const auto spin_until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int complete = 0; !complete;) {
      done =
          FromMpi(MPI_Testall(static_cast<int>(requests.size()),
                              requests.data(), &complete, MPI_STATUSES_IGNORE),
                  "exchange");
      if (!done.ok()) break;
      if (!complete && std::chrono::steady_clock::now() > spin_until)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return posted.ok() ? done : posted;
  }

 private:
  // Messages of ckptdb never meet the caller's: the communicator is a
  // duplicate.
  static constexpr int kTag = 0;

  // Posts every receive (first, so that eager sends find them) and send in
  // pieces of at most max_message_ bytes. An empty buffer is one empty message.
  Status Post(std::span<const SendBuffer> sends,
              std::span<const RecvBuffer> recvs,
              std::vector<MPI_Request>* requests) {
    auto pieces = [&](int peer, size_t nbytes, const char* what,
                      auto&& post) -> Status {
      if (peer < 0 || peer >= size_) {
        return Status::Internal(
            std::string(what).append(" rank ").append(std::to_string(peer)));
      }
      size_t off = 0;
      do {
        const size_t n = std::min(max_message_, nbytes - off);
        requests->emplace_back();
        CKPTDB_RETURN_IF_ERROR(
            FromMpi(post(off, static_cast<int>(n), &requests->back()), what));
        off += n;
      } while (off < nbytes);
      return Status::OK();
    };
    for (const RecvBuffer& r : recvs) {
      CKPTDB_RETURN_IF_ERROR(pieces(r.peer, r.nbytes, "receive from",
                                    [&](size_t off, int n, MPI_Request* q) {
                                      return MPI_Irecv(
                                          static_cast<char*>(r.data) + off, n,
                                          MPI_BYTE, r.peer, kTag, comm_, q);
                                    }));
    }
    for (const SendBuffer& s : sends) {
      CKPTDB_RETURN_IF_ERROR(pieces(
          s.peer, s.nbytes, "send to", [&](size_t off, int n, MPI_Request* q) {
            return MPI_Isend(static_cast<const char*>(s.data) + off, n,
                             MPI_BYTE, s.peer, kTag, comm_, q);
          }));
    }
    return Status::OK();
  }

  Status BroadcastBuffer(char* data, uint64_t n, int root) {
    for (uint64_t off = 0; off < n; off += max_message_) {
      const int count =
          static_cast<int>(std::min<uint64_t>(max_message_, n - off));
      CKPTDB_RETURN_IF_ERROR(FromMpi(
          MPI_Bcast(data + off, count, MPI_BYTE, root, comm_), "broadcast"));
    }
    return Status::OK();
  }

  MPI_Comm comm_;
  size_t max_message_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

Result<std::shared_ptr<Communicator>> NewMpiCommunicator(MPI_Comm comm,
                                                         size_t max_message) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return Status::FailedPrecondition(
        "MPI is not initialized (or already finalized): call MPI_Init before "
        "creating an MPI communicator");
  }
  if (comm == MPI_COMM_NULL)
    return Status::InvalidArgument("MPI communicator is MPI_COMM_NULL");
  if (max_message == 0 || max_message > INT_MAX) {
    return Status::InvalidArgument("MPI message size must be in [1, INT_MAX]");
  }
  MPI_Comm dup;
  CKPTDB_RETURN_IF_ERROR(
      FromMpi(MPI_Comm_dup(comm, &dup), "communicator duplication"));
  // Errors come back as codes rather than aborting the job.
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  return std::shared_ptr<Communicator>(std::make_shared<Mpi>(dup, max_message));
}

}  // namespace engine

Result<std::shared_ptr<Communicator>> MpiCommunicator(MPI_Comm comm) {
  return engine::NewMpiCommunicator(comm, size_t{1} << 30);
}

}  // namespace ckptdb
