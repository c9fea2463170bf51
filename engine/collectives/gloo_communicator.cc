// The gloo communicator: byte collectives (gloo's allgather, allgatherv,
// broadcast, barrier) and point-to-point transfers (gloo's unbound buffers)
// over a full mesh of TCP connections made through a RendezvousStore. gloo
// reports failures by exceptions; they end here, as IOError naming the call.
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

#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
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

class Gloo : public Communicator {
 public:
  explicit Gloo(std::shared_ptr<gloo::Context> context)
      : context_(std::move(context)),
        sent_(context_->size, 0),
        received_(context_->size, 0) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  Status Barrier() override {
    return Run("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      gloo::barrier(opts);
    });
  }

  Result<std::vector<std::string>> AllGather(std::string_view bytes) override {
    const int n = size();
    std::vector<uint64_t> sizes(n);
    uint64_t mine = bytes.size();
    CKPTDB_RETURN_IF_ERROR(Run("all-gather of sizes", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setTag(NextTag());
      opts.setInput(&mine, 1);
      opts.setOutput(sizes.data(), sizes.size());
      gloo::allgather(opts);
    }));
    // Each rank's part is its bytes and one more, so that no part is empty.
    std::vector<size_t> counts(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) total += counts[r] = sizes[r] + 1;
    std::string input(bytes);
    input.push_back('\0');
    std::string flat(total, '\0');
    CKPTDB_RETURN_IF_ERROR(Run("all-gather", [&] {
      gloo::AllgathervOptions opts(context_);
      opts.setTag(NextTag());
      opts.setInput(input.data(), input.size());
      opts.setOutput(flat.data(), counts);
      gloo::allgatherv(opts);
    }));
    std::vector<std::string> out(n);
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      out[r].assign(flat, at, sizes[r]);
      at += counts[r];
    }
    return out;
  }

  Status Broadcast(std::string* bytes, int root) override {
    if (root < 0 || root >= size())
      return Status::Internal("broadcast from rank " + std::to_string(root) +
                              " of a group of " + std::to_string(size()));
    uint64_t n = bytes->size();
    CKPTDB_RETURN_IF_ERROR(Run("broadcast of size", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(NextTag());
      opts.setRoot(root);
      opts.setOutput(&n, 1);
      gloo::broadcast(opts);
    }));
    bytes->resize(n);
    if (n == 0 || size() == 1) return Status::OK();
    return Run("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(NextTag());
      opts.setRoot(root);
      opts.setOutput(bytes->data(), n);
      gloo::broadcast(opts);
    });
  }

  Status Exchange(std::span<const SendBuffer> sends,
                  std::span<const RecvBuffer> recvs) override {
    for (const SendBuffer& s : sends) {
      if (s.peer < 0 || s.peer >= size())
        return Status::Internal("send to rank " + std::to_string(s.peer));
    }
    for (const RecvBuffer& r : recvs) {
      if (r.peer < 0 || r.peer >= size())
        return Status::Internal("receive from rank " + std::to_string(r.peer));
    }
    // The k-th message ever from one rank to another travels on slot k of
    // their pair: messages of a pair match in order, whichever calls of the
    // two ranks carry them (a rank with nothing to send in a round may skip
    // it). Messages to this rank itself are copies; empty ones are counted
    // but not sent (both sides know the sizes).
    auto slot = [](uint64_t k) {
      return (uint64_t{0xCC} << 56) | (k & ((uint64_t{1} << 56) - 1));
    };
    Status self = CopyToSelf(sends, recvs);
    if (!self.ok()) return self;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> posted_recvs,
        posted_sends;
    std::vector<int> recv_peer, send_peer;
    Status posted = Run("exchange", [&] {
      for (const RecvBuffer& r : recvs) {
        if (r.peer == rank()) continue;
        const uint64_t k = received_[r.peer]++;
        if (r.nbytes == 0) continue;
        posted_recvs.push_back(context_->createUnboundBuffer(r.data, r.nbytes));
        posted_recvs.back()->recv(r.peer, slot(k));
        recv_peer.push_back(r.peer);
      }
      for (const SendBuffer& s : sends) {
        if (s.peer == rank()) continue;
        const uint64_t k = sent_[s.peer]++;
        if (s.nbytes == 0) continue;
        posted_sends.push_back(
            context_->createUnboundBuffer(const_cast<void*>(s.data), s.nbytes));
        posted_sends.back()->send(s.peer, slot(k));
        send_peer.push_back(s.peer);
      }
    });
    // Wait for whatever was posted, even after an error, so that no transfer
    // outlives its buffer.
    Status done = posted;
    for (size_t i = 0; i < posted_recvs.size(); ++i) {
      Status s =
          Run("exchange: receiving from rank " + std::to_string(recv_peer[i]),
              [&] { posted_recvs[i]->waitRecv(); });
      if (done.ok()) done = s;
    }
    for (size_t i = 0; i < posted_sends.size(); ++i) {
      Status s =
          Run("exchange: sending to rank " + std::to_string(send_peer[i]),
              [&] { posted_sends[i]->waitSend(); });
      if (done.ok()) done = s;
    }
    return done;
  }

 private:
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
      return Status::IOError("gloo " + what + " on rank " +
                             std::to_string(rank()) + " of " +
                             std::to_string(size()) + " failed: " + e.what());
    }
  }

  std::shared_ptr<gloo::Context> context_;
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

// One attempt: this rank's device and its connections to every other rank.
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
    std::shared_ptr<gloo::Context> context;
    Status connected = ConnectMesh(store, options, prefix, &context);
    last = Status::OK();
    CKPTDB_RETURN_IF_ERROR(
        AgreeOnConnect(*store, options, prefix, connected, &last));
    if (last.ok())
      return std::shared_ptr<Communicator>(std::make_shared<Gloo>(context));
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
