// The gloo communicator: point-to-point transfers (gloo's unbound buffers) and
// byte collectives (by messages between every two ranks in small groups, by
// gloo's allgather, allgatherv, broadcast and barrier in larger ones) over two
// full meshes of TCP connections made through a RendezvousStore. gloo reports
// failures by exceptions; they end here, as IOError naming the call.
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ckptdb/gloo.h"

namespace ckptdb {
namespace {

// gloo's view of a RendezvousStore: keys under the communicator's prefix;
// errors become exceptions, which gloo's rendezvous passes through.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<RendezvousStore> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s =
        store_->Set(prefix_ + "/" + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    Result<std::string> value = store_->Get(prefix_ + "/" + key);
    if (!value.ok()) throw std::runtime_error(value.status().ToString());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& key : keys) (void)get(key);
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds&) override {
    wait(keys);
  }

 private:
  std::shared_ptr<RendezvousStore> store_;
  std::string prefix_;
};

// The address other ranks connect to: the interface's or host name's, else
// the one the machine's host name resolves to (loopback when it resolves to
// nothing).
gloo::transport::tcp::attr DeviceAttr(const GlooOptions& options) {
  gloo::transport::tcp::attr attr;
  if (!options.interface.empty()) {
    attr.iface = options.interface;
    return attr;
  }
  if (!options.hostname.empty()) {
    attr.hostname = options.hostname;
    return attr;
  }
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(name, nullptr, &hints, &found) == 0) {
      ::freeaddrinfo(found);
      attr.hostname = name;
      return attr;
    }
  }
  attr.hostname = "127.0.0.1";
  return attr;
}

// Messages between two ranks travel on two meshes: from the lower rank to the
// higher on `up`'s pairs, the other way on `down`'s. gloo's TCP pair guards its
// socket with one lock, which the calling thread holds while it writes a
// message in place; the pair's event loop, finding that lock taken when the
// peer's bytes arrive, returns to epoll at once and spins until it is free.
// With one socket per direction, a rank's sending to a peer never holds the
// lock under which its loop receives that peer's message (two ranks
// exchanging a round spun their loops at ~300,000 epoll calls a second, most
// of a small host's CPU; bench/README.md).
class Gloo : public Communicator {
 public:
  Gloo(std::shared_ptr<gloo::Context> up, std::shared_ptr<gloo::Context> down)
      : up_(std::move(up)),
        down_(std::move(down)),
        sent_(up_->size, 0),
        received_(up_->size, 0) {}

  int rank() const override { return up_->rank; }
  int size() const override { return up_->size; }

  Status Barrier() override {
    CKPTDB_RETURN_IF_ERROR(CheckUsable("barrier"));
    if (size() <= kDirectRanks) {
      // An empty block to and from every other rank: the size of an
      // all-gather's first messages, so that a barrier met by another rank's
      // all-gather (a caller's mistake) shows there as an empty part and both
      // return, where messages of two sizes would abort the process (gloo
      // enforces a message's size in its event loop).
      const size_t block = BlockBytes();
      std::vector<char> blocks(block * size());
      return GatherBlocks(block, blocks.data(), "barrier");
    }
    return Run("barrier", [&] {
      gloo::BarrierOptions opts(up_);
      opts.setTag(NextTag());
      gloo::barrier(opts);
    });
  }

  // One step for parts of up to a block's bytes (a block from every rank,
  // holding its part's size and first bytes), a second for the rest of
  // longer parts.
  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    CKPTDB_RETURN_IF_ERROR(CheckUsable("all-gather"));
    const int n = size();
    const size_t block = BlockBytes();
    std::vector<char> blocks(block * n);
    WriteBlock(bytes, block, &blocks[block * rank()]);
    CKPTDB_RETURN_IF_ERROR(GatherBlocks(block, blocks.data()));
    std::vector<std::string> out(n);
    std::vector<uint64_t> rest(n);
    for (int r = 0; r < n; ++r) {
      CKPTDB_RETURN_IF_ERROR(
          ReadBlock(&blocks[block * r], block, r, &out[r], &rest[r]));
    }
    if (std::all_of(rest.begin(), rest.end(),
                    [](uint64_t x) { return x == 0; }))
      return out;
    const std::string_view mine = bytes.substr(bytes.size() - rest[rank()]);
    CKPTDB_RETURN_IF_ERROR(GatherRest(mine, rest, &out));
    return out;
  }

  Status Broadcast(std::string* bytes, int root) override {
    if (root < 0 || root >= size())
      return Status::Internal("broadcast from rank " + std::to_string(root) +
                              " of a group of " + std::to_string(size()));
    if (size() == 1) return Status::OK();
    CKPTDB_RETURN_IF_ERROR(CheckUsable("broadcast"));
    const size_t block = BlockBytes();
    std::vector<char> head(block);
    if (rank() == root) WriteBlock(*bytes, block, head.data());
    CKPTDB_RETURN_IF_ERROR(Run("broadcast", [&] {
      gloo::BroadcastOptions opts(up_);
      opts.setTag(NextTag());
      opts.setRoot(root);
      opts.setOutput(head.data(), head.size());
      gloo::broadcast(opts);
    }));
    if (rank() == root) {
      if (bytes->size() <= block - kSizeBytes) return Status::OK();
    } else {
      uint64_t rest = 0;
      CKPTDB_RETURN_IF_ERROR(ReadBlock(head.data(), block, root, bytes, &rest));
      if (rest == 0) return Status::OK();
      bytes->resize(bytes->size() + rest);
    }
    char* tail = bytes->data() + (block - kSizeBytes);
    const size_t tail_bytes = bytes->size() - (block - kSizeBytes);
    return Run("broadcast", [&] {
      gloo::BroadcastOptions opts(up_);
      opts.setTag(NextTag());
      opts.setRoot(root);
      opts.setOutput(tail, tail_bytes);
      gloo::broadcast(opts);
    });
  }

  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    CKPTDB_RETURN_IF_ERROR(CheckPeers(sends, recvs));
    CKPTDB_RETURN_IF_ERROR(CheckUsable("exchange"));
    CKPTDB_RETURN_IF_ERROR(CopyToSelf(sends, recvs));
    return PointToPoint(sends, recvs, "exchange");
  }

  // gloo's unbound buffers meet in a rendezvous: a sender's bytes leave only
  // once the receiver has posted its receive and said so. Posted early, the
  // receives of a load's next round take their peers' bytes while this rank
  // still reads its own chunks.
  Result<std::unique_ptr<PostedRecvs>> PostRecvs(
      std::span<const RecvBuffer> recvs) override {
    CKPTDB_RETURN_IF_ERROR(CheckPeers({}, recvs));
    CKPTDB_RETURN_IF_ERROR(CheckUsable("exchange"));
    auto posted = std::make_unique<Posted>();
    // A failure part-way has counted some receives already: the handle
    // carries it to the exchange, which reports it without posting again.
    posted->failed = Post(recvs, *posted, "exchange");
    return std::unique_ptr<PostedRecvs>(std::move(posted));
  }

  Status ExchangePosted(std::span<const SendBuffer> sends,
                        std::unique_ptr<PostedRecvs> handle) override {
    Posted none;
    Posted* posted = &none;
    if (handle != nullptr) {
      posted = dynamic_cast<Posted*>(handle.get());
      if (posted == nullptr) {
        return Status::Internal(
            "exchange given receives posted through another communicator");
      }
    }
    CKPTDB_RETURN_IF_ERROR(CheckPeers(sends, {}));
    // (A failure: `handle` waits for its receives as it goes.)
    CKPTDB_RETURN_IF_ERROR(CheckUsable("exchange"));
    const Status to_self = CopyToSelf(sends, posted->self);
    const Status done = SendAndWait(sends, *posted, posted->failed, "exchange");
    return to_self.ok() ? done : to_self;
  }

 private:
  // Groups up to this size gather by messages between every two ranks (one
  // step; the messages of a pair go one way per socket); larger ones by
  // gloo's ring, whose steps send and receive on different pairs.
  static constexpr int kDirectRanks = 8;
  static constexpr size_t kSizeBytes = sizeof(uint64_t);
  // How long a transfer with a peer that failed another transfer of the same
  // call is waited for.
  static constexpr std::chrono::milliseconds kAfterPeerFailed{100};

  // The block each rank contributes to a gather: 4 KiB, less in large groups
  // (all blocks together stay within 4 MiB), at least 64 bytes.
  size_t BlockBytes() const {
    const size_t fair = (size_t{4} << 20) / static_cast<size_t>(size());
    return std::clamp<size_t>(fair, 64, 4096);
  }

  // A part's size, then as many of its first bytes as fit.
  static void WriteBlock(std::string_view part, size_t block, char* out) {
    const uint64_t n = part.size();
    std::memcpy(out, &n, kSizeBytes);
    std::memcpy(out + kSizeBytes, part.data(),
                std::min<size_t>(part.size(), block - kSizeBytes));
  }

  // Rank `from`'s block: its first bytes into `*part`, the count of those
  // still to come into `*rest`.
  Status ReadBlock(const char* in, size_t block, int from, std::string* part,
                   uint64_t* rest) const {
    uint64_t n = 0;
    std::memcpy(&n, in, kSizeBytes);
    if (n > (uint64_t{1} << 40)) {
      return Status::Internal("gloo: malformed size " + std::to_string(n) +
                              " received from rank " + std::to_string(from));
    }
    const size_t head = std::min<uint64_t>(n, block - kSizeBytes);
    part->assign(in + kSizeBytes, head);
    *rest = n - head;
    return Status::OK();
  }

  // Every rank's block into `blocks` (rank r's at r * block; this rank's
  // written there already).
  Status GatherBlocks(size_t block, char* blocks,
                      const std::string& what = "all-gather") {
    if (size() <= kDirectRanks) {
      std::vector<SendBuffer> sends;
      std::vector<RecvBuffer> recvs;
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) continue;
        sends.push_back({r, blocks + block * rank(), block});
        recvs.push_back({r, blocks + block * r, block});
      }
      return PointToPoint(sends, recvs, what);
    }
    return Run(what, [&] {
      gloo::AllgatherOptions opts(up_);
      opts.setTag(NextTag());
      opts.setInput(blocks + block * rank(), block);
      opts.setOutput(blocks, block * size());
      gloo::allgather(opts);
    });
  }

  // The bytes of every part that did not fit its block, appended to `*out`.
  Status GatherRest(std::string_view mine, const std::vector<uint64_t>& rest,
                    std::vector<std::string>* out) {
    const int n = size();
    std::vector<size_t> at(n);
    for (int r = 0; r < n; ++r) {
      at[r] = (*out)[r].size();
      (*out)[r].resize(at[r] + rest[r]);
    }
    if (n <= kDirectRanks) {
      std::vector<SendBuffer> sends;
      std::vector<RecvBuffer> recvs;
      for (int r = 0; r < n; ++r) {
        if (r == rank()) continue;
        if (!mine.empty()) sends.push_back({r, mine.data(), mine.size()});
        if (rest[r] > 0)
          recvs.push_back({r, (*out)[r].data() + at[r], rest[r]});
      }
      std::memcpy((*out)[rank()].data() + at[rank()], mine.data(), mine.size());
      return PointToPoint(sends, recvs, "all-gather");
    }
    // gloo's allgatherv with a byte more per part, so that none is empty.
    std::vector<size_t> counts(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) total += counts[r] = rest[r] + 1;
    std::string input(mine);
    input.push_back('\0');
    std::string flat(total, '\0');
    CKPTDB_RETURN_IF_ERROR(Run("all-gather", [&] {
      gloo::AllgathervOptions opts(up_);
      opts.setTag(NextTag());
      opts.setInput(input.data(), input.size());
      opts.setOutput(flat.data(), counts);
      gloo::allgatherv(opts);
    }));
    size_t from = 0;
    for (int r = 0; r < n; ++r) {
      std::memcpy((*out)[r].data() + at[r], flat.data() + from, rest[r]);
      from += counts[r];
    }
    return Status::OK();
  }

  // The mesh whose pairs carry messages from this rank to `peer`, and from
  // `peer` to this rank.
  const std::shared_ptr<gloo::Context>& To(int peer) const {
    return rank() < peer ? up_ : down_;
  }
  const std::shared_ptr<gloo::Context>& From(int peer) const {
    return peer < rank() ? up_ : down_;
  }

  // Receives posted on gloo's unbound buffers, and those from this rank
  // itself (matched with its sends to itself at the exchange). Destroyed, it
  // waits for the posted receives: no transfer outlives its buffer.
  class Posted : public PostedRecvs {
   public:
    struct Receive {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
      int peer = 0;
    };
    ~Posted() override {
      for (Receive& r : receives) {
        try {
          r.buffer->waitRecv();
        } catch (const std::exception&) {  // the exchange reported it
        }
      }
    }
    std::vector<Receive> receives;  // each posted on its buffer
    std::vector<RecvBuffer> self;
    Status failed;  // posting them failed part-way
  };

  Status CheckPeers(std::span<const SendBuffer> sends,
                    std::span<const RecvBuffer> recvs) const {
    for (const SendBuffer& s : sends) {
      if (s.peer < 0 || s.peer >= size())
        return Status::Internal("send to rank " + std::to_string(s.peer));
    }
    for (const RecvBuffer& r : recvs) {
      if (r.peer < 0 || r.peer >= size())
        return Status::Internal("receive from rank " + std::to_string(r.peer));
    }
    return Status::OK();
  }

  // The k-th message ever from one rank to another travels on slot k of
  // their pair: messages of a pair match in order, whichever calls of the
  // two ranks carry them (a rank with nothing to send in a round may skip
  // it). Empty messages are counted but not sent (both sides know the sizes).
  static uint64_t Slot(uint64_t k) {
    return (uint64_t{0xCC} << 56) | (k & ((uint64_t{1} << 56) - 1));
  }

  // Posts the receives from other ranks into `posted`, and keeps those from
  // this rank there.
  Status Post(std::span<const RecvBuffer> recvs, Posted& posted,
              const std::string& what) {
    // Room for all first, so that recording a posted receive cannot throw.
    posted.receives.reserve(posted.receives.size() + recvs.size());
    return Run(what, [&] {
      for (const RecvBuffer& r : recvs) {
        if (r.peer == rank()) {
          posted.self.push_back(r);
          continue;
        }
        const uint64_t k = received_[r.peer]++;
        if (r.nbytes == 0) continue;
        Posted::Receive receive{
            From(r.peer)->createUnboundBuffer(r.data, r.nbytes), r.peer};
        receive.buffer->recv(r.peer, Slot(k));
        posted.receives.push_back(std::move(receive));
      }
    });
  }

  // Moves messages to and from other ranks (none to this rank itself).
  Status PointToPoint(std::span<const SendBuffer> sends,
                      std::span<const RecvBuffer> recvs,
                      const std::string& what) {
    Posted posted;
    const Status receiving = Post(recvs, posted, what);
    return SendAndWait(sends, posted, receiving, what);
  }

  // Sends to other ranks (none to this rank itself), then waits for them and
  // for `posted`'s receives, even after an error (`receiving`, or one here).
  Status SendAndWait(std::span<const SendBuffer> sends, Posted& posted,
                     const Status& receiving, const std::string& what) {
    // The sends that started, each with its peer: only those are waited for
    // (a send that threw, to a peer whose connection is gone, left nothing
    // pending, and the others after it were not started).
    struct Started {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
      int peer;
    };
    std::vector<Started> started;
    started.reserve(sends.size());
    Status done = receiving;
    const Status sending = Run(what, [&] {
      for (const SendBuffer& s : sends) {
        if (s.peer == rank()) continue;
        const uint64_t k = sent_[s.peer]++;
        if (s.nbytes == 0) continue;
        auto buffer = To(s.peer)->createUnboundBuffer(const_cast<void*>(s.data),
                                                      s.nbytes);
        buffer->send(s.peer, Slot(k));
        started.push_back({std::move(buffer), s.peer});
      }
    });
    if (done.ok()) done = sending;
    // A peer that failed one wait (gone, or silent past the group's timeout)
    // is not waited for a full timeout again: its other transfers of this
    // call get kAfterPeerFailed, so that the call fails after one timeout,
    // not one per transfer with that peer (a peer gone or stopped has none of
    // them under way).
    std::set<int> failed_peers;
    auto wait = [&](int peer, const std::string& step, auto&& wait_for) {
      const std::chrono::milliseconds timeout =
          failed_peers.contains(peer) ? kAfterPeerFailed
                                      : gloo::transport::kUnsetTimeout;
      const Status s = Run(what + ": " + step + " rank " + std::to_string(peer),
                           [&] { wait_for(timeout); });
      if (!s.ok()) failed_peers.insert(peer);
      if (done.ok()) done = s;
    };
    for (Posted::Receive& r : posted.receives) {
      wait(r.peer, "receiving from", [&](std::chrono::milliseconds timeout) {
        r.buffer->waitRecv(nullptr, timeout);
      });
    }
    posted.receives.clear();
    for (Started& sent : started) {
      wait(sent.peer, "sending to", [&](std::chrono::milliseconds timeout) {
        sent.buffer->waitSend(nullptr, timeout);
      });
    }
    return done;
  }

  // Sends to this rank itself, copied into its receives from itself in order.
  Status CopyToSelf(std::span<const SendBuffer> sends,
                    std::span<const RecvBuffer> recvs) {
    std::vector<const SendBuffer*> out;
    for (const SendBuffer& s : sends)
      if (s.peer == rank()) out.push_back(&s);
    size_t k = 0;
    for (const RecvBuffer& r : recvs) {
      if (r.peer != rank()) continue;
      if (k >= out.size() || out[k]->nbytes != r.nbytes) {
        return Status::Internal("exchange: rank " + std::to_string(rank()) +
                                "'s messages to itself do not match its "
                                "receives from itself");
      }
      if (r.nbytes > 0) std::memcpy(r.data, out[k]->data, r.nbytes);
      ++k;
    }
    if (k != out.size())
      return Status::Internal("exchange: rank " + std::to_string(rank()) +
                              " sends itself more messages than it receives");
    return Status::OK();
  }

  uint32_t NextTag() { return tags_++; }

  template <typename Fn>
  Status Run(const std::string& what, Fn&& fn) {
    try {
      fn();
      return Status::OK();
    } catch (const std::exception& e) {
      Status failed = Status::IOError(
          "gloo " + what + " on rank " + std::to_string(rank()) + " of " +
          std::to_string(size()) + " failed: " + e.what());
      std::lock_guard lock(failure_mu_);
      if (failure_.ok()) failure_ = failed;
      return failed;
    }
  }

  // A group whose connections failed (a peer gone, or silent past the
  // timeout) is not used again: its pairs' state is unknown, and each later
  // call would wait another full timeout for the same peer (a save whose
  // peer stopped failed after twice the group's timeout, the second wait
  // being the agreement on the first failure). Every later call fails at once
  // naming the first failure.
  Status CheckUsable(const std::string& what) {
    std::lock_guard lock(failure_mu_);
    if (failure_.ok()) return Status::OK();
    return Status::IOError(
        "gloo " + what + " on rank " + std::to_string(rank()) +
        ": the group's connections failed earlier (" + failure_.message() +
        "); open the store again to go on");
  }

  std::shared_ptr<gloo::Context> up_, down_;
  std::mutex failure_mu_;
  Status failure_;  // the first failure of a gloo call; OK while none
  uint32_t tags_ = 0;
  // Messages sent to and received from each rank so far.
  std::vector<uint64_t> sent_, received_;
};

class InMemoryStore : public RendezvousStore {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mu_);
      values_[key] = value;
    }
    changed_.notify_all();
    return Status::OK();
  }
  Result<std::string> Get(const std::string& key) override {
    std::unique_lock lock(mu_);
    if (!changed_.wait_for(lock, std::chrono::minutes(5),
                           [&] { return values_.contains(key); })) {
      return Status::IOError("rendezvous: no rank set key '" + key +
                             "' within 5 minutes");
    }
    return values_.at(key);
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// gloo's TCP pairs of this version listen on a socket each and take the first
// connection that reaches it, with no handshake naming the peer; on a busy
// host a pair's set-up can fail ("Connection closed by peer") although every
// rank is well. The ranks then agree, through the store, to set up the whole
// mesh again under a fresh prefix, a bounded number of times.
constexpr int kConnectAttempts = 3;

// One mesh: this rank's device and its connections to every other rank.
Status ConnectMesh(const std::shared_ptr<RendezvousStore>& store,
                   const GlooOptions& options, const std::string& prefix,
                   std::shared_ptr<gloo::Context>* context) {
  try {
    auto device = gloo::transport::tcp::CreateDevice(DeviceAttr(options));
    auto made =
        std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    made->setTimeout(options.timeout);
    StoreAdapter adapter(store, prefix);
    made->connectFullMesh(adapter, device);
    *context = std::move(made);
    return Status::OK();
  } catch (const std::exception& e) {
    return Status::IOError(e.what());
  }
}

// Every rank's outcome of one attempt, published in the store: `*agreed` is OK
// when every rank connected, else the first rank's failure, the same on every
// rank. An error of the store itself (a rank that never answers) is returned
// and ends the set-up.
Status AgreeOnConnect(RendezvousStore& store, const GlooOptions& options,
                      const std::string& prefix, const Status& mine,
                      Status* agreed) {
  const std::string key = prefix + "/connected/";
  constexpr std::string_view kConnected = "connected";
  CKPTDB_RETURN_IF_ERROR(store.Set(
      key + std::to_string(options.rank),
      mine.ok() ? std::string(kConnected) : "failed: " + mine.message()));
  for (int r = 0; r < options.size; ++r) {
    Result<std::string> outcome = store.Get(key + std::to_string(r));
    if (!outcome.ok()) {
      return Status::IOError("gloo communicator: rank " +
                             std::to_string(options.rank) +
                             " waited for the others' connections (prefix '" +
                             prefix + "'): " + outcome.status().message());
    }
    if (*outcome != kConnected && agreed->ok())
      *agreed = Status::IOError("rank " + std::to_string(r) + " " + *outcome);
  }
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<Communicator>> GlooCommunicator(
    std::shared_ptr<RendezvousStore> store, const GlooOptions& options) {
  if (!store) return Status::InvalidArgument("gloo communicator: no store");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return Status::InvalidArgument(
        "gloo communicator: rank " + std::to_string(options.rank) +
        " is not in a group of " + std::to_string(options.size));
  }
  if (options.timeout.count() <= 0) {
    return Status::InvalidArgument(
        "gloo communicator: timeout must be positive");
  }
  Status last;
  for (int attempt = 0; attempt < kConnectAttempts; ++attempt) {
    const std::string prefix =
        options.prefix + "/attempt-" + std::to_string(attempt);
    // One mesh, then the other, each agreed on before the next begins.
    std::shared_ptr<gloo::Context> meshes[2];
    last = Status::OK();
    for (int m = 0; m < 2 && last.ok(); ++m) {
      const std::string at = prefix + (m == 0 ? "/up" : "/down");
      const Status connected = ConnectMesh(store, options, at, &meshes[m]);
      CKPTDB_RETURN_IF_ERROR(
          AgreeOnConnect(*store, options, at, connected, &last));
    }
    if (last.ok()) {
      return std::shared_ptr<Communicator>(
          std::make_shared<Gloo>(meshes[0], meshes[1]));
    }
  }
  return Status::IOError(
      "gloo communicator: rank " + std::to_string(options.rank) + " of " +
      std::to_string(options.size) + " could not connect to the others in " +
      std::to_string(kConnectAttempts) + " attempts (prefix '" +
      options.prefix + "'): " + last.message());
}

std::shared_ptr<RendezvousStore> InMemoryRendezvousStore() {
  return std::make_shared<InMemoryStore>();
}

}  // namespace ckptdb
