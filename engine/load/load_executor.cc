#include "engine/load/load_executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "engine/collectives/wire.h"
#include "engine/copy/box_copy.h"
#include "engine/device/device.h"

namespace ckptdb::engine {
namespace {

using planner::ExchangeDeviceBox;
using planner::ExchangeMessage;
using planner::ExchangeRound;
using planner::ReadCopy;

// Device buffers of one round: boxes packed by this rank (pinned host, then
// device) and boxes staged before landing.
struct DeviceSlot {
  DeviceSlot(DeviceCopier* copier, Device device)
      : out(copier, device), in(copier, device) {}
  StagingBuffer host_out;
  DeviceBuffer out, in;
};

// What one round in flight holds. Two slots alternate: round k + 1 is read
// into one while round k is exchanged from the other.
struct Slot {
  const ExchangeRound* round = nullptr;
  std::vector<char*> send_staged;          // per send: packed here, or null
  std::vector<const char*> send_data;      // per send: what goes out
  std::vector<char*> recv_data;            // per receive
  std::vector<storage::ChunkBuffer> held;  // per read: chunks sent in place
  // The round's receives, posted when it was prepared (null: none, or not
  // posted early and made by the exchange).
  std::unique_ptr<PostedRecvs> posted;
  std::optional<DeviceSlot> device;
  size_t remaining = 0;  // reads not done yet (guarded by Walker::mu_)
};

class Walker {
 public:
  // `tensor_of_read`: the tensor of each read of x.plan.
  Walker(const LoadExecution& x, const planner::ExchangePlan& plan,
         const std::vector<const TensorMetadata*>& tensor_of_read)
      : x_(x),
        plan_(plan),
        rank_(x.comm.rank()),
        tensor_of_read_(tensor_of_read) {}

  Status Run() {
    // Once per load, before any reader starts or any byte moves: a rank
    // without the memory for its rounds cannot take part in their exchanges,
    // and every rank returns its error.
    Status reserved = ReserveScratch();
    if (reserved.ok() && x_.transport != nullptr) reserved = ReserveDevice();
    if (x_.comm.size() > 1) reserved = AgreeOnStatus(x_.comm, reserved);
    CKPTDB_RETURN_IF_ERROR(reserved);
    const auto& rounds = plan_.rounds;
    for (size_t k = 0; k < rounds.size(); ++k) Batch(k);
    for (size_t k = 0; k < std::min<size_t>(2, rounds.size()); ++k) Prepare(k);
    // Readers read ahead while this thread exchanges the rounds in order; it
    // reads with them until the round it exchanges next is read. Where the
    // rank moves slices to or from peers, an exchange can keep this thread
    // busy (over TCP it writes every byte to a socket), and io_threads
    // readers read besides it: counted as one of them, it left one reader on
    // 2 cores (a 2-rank resharded load over gloo took 0.13-0.16 s, against
    // 0.10-0.12 s; bench/README.md). Otherwise it is one of the io_threads
    // (one more reader slowed a one-process load of 78 chunks by 15%).
    std::vector<std::thread> readers;
    const int helpers =
        ExchangesWithPeers() ? x_.io_threads : x_.io_threads - 1;
    const int threads =
        std::max(1, std::min<int>(helpers, static_cast<int>(batches_.size())));
    for (int t = 0; t < threads; ++t)
      readers.emplace_back([this] { ReadLoop(); });
    for (size_t k = 0; k < rounds.size(); ++k) {
      Slot& slot = slots_[k % 2];
      while (HelpRead(k)) {
      }
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return slot.remaining == 0; });
      }
      Exchange(slot);
      Land(slot);
      slot.held.clear();
      if (k + 2 < rounds.size()) Prepare(k + 2);
    }
    for (std::thread& t : readers) t.join();
    return first_error_;
  }

 private:
  // Records a failure; the walk goes on so that no peer waits forever.
  void Fail(Status s) {
    if (s.ok()) return;
    std::lock_guard lock(error_mu_);
    if (first_error_.ok()) first_error_ = std::move(s);
  }

  // Whether any round moves host messages between this rank and a peer.
  bool ExchangesWithPeers() const {
    for (const ExchangeRound& round : plan_.rounds) {
      for (const ExchangeMessage& m : round.sends)
        if (m.peer != rank_) return true;
      for (const ExchangeMessage& m : round.recvs)
        if (m.peer != rank_) return true;
    }
    return false;
  }

  // Host bytes round k stages: its messages that do not land in place.
  static uint64_t StagedBytes(const ExchangeRound& round) {
    uint64_t bytes = 0;
    for (const ExchangeMessage& m : round.sends)
      bytes += m.in_place ? 0 : m.nbytes;
    for (const ExchangeMessage& m : round.recvs)
      bytes += m.in_place ? 0 : m.nbytes;
    return bytes;
  }

  // Host staging for the largest round of each parity, so that preparing a
  // round while readers run allocates nothing.
  Status ReserveScratch() {
    for (int p = 0; p < 2; ++p) {
      uint64_t most = 0;
      for (size_t k = p; k < plan_.rounds.size(); k += 2)
        most = std::max(most, StagedBytes(plan_.rounds[k]));
      Result<char*> reserved = x_.scratch.Reserve(p, most);
      if (!reserved.ok()) {
        return reserved.status().WithContext("load on rank " +
                                             std::to_string(rank_));
      }
      scratch_[p] = *reserved;
    }
    return Status::OK();
  }

  // Device buffers for the largest round of each parity.
  Status ReserveDevice() {
    DeviceCopier* copier = x_.copier;
    for (int p = 0; p < 2; ++p) {
      uint64_t out = 0, in = 0;
      for (size_t k = p; k < plan_.rounds.size(); k += 2) {
        out = std::max(out, plan_.rounds[k].device_out_bytes);
        in = std::max(in, plan_.rounds[k].device_in_bytes);
      }
      DeviceSlot& d = slots_[p].device.emplace(copier, x_.transport->device());
      if (out > 0) {
        d.host_out.Reserve(copier, out);
        CKPTDB_RETURN_IF_ERROR(d.out.Reserve(out));
      }
      if (in > 0) CKPTDB_RETURN_IF_ERROR(d.in.Reserve(in));
    }
    return Status::OK();
  }

  // Lays out round k's host buffers and lets the readers start on it.
  void Prepare(size_t k) {
    Slot& slot = slots_[k % 2];
    const ExchangeRound& round = plan_.rounds[k];
    // Staged sends, then staged receives, in the parity's reserved memory.
    char* at = scratch_[k % 2];
    slot.send_data.assign(round.sends.size(), nullptr);
    slot.send_staged.assign(round.sends.size(), nullptr);
    slot.recv_data.assign(round.recvs.size(), nullptr);
    for (size_t m = 0; m < round.sends.size(); ++m) {
      if (round.sends[m].in_place) continue;  // set by the chunk's reader
      slot.send_data[m] = slot.send_staged[m] = at;
      at += round.sends[m].nbytes;
    }
    for (size_t m = 0; m < round.recvs.size(); ++m) {
      const ExchangeMessage& msg = round.recvs[m];
      if (msg.in_place) {
        const planner::ReadItem& item = x_.plan.items[msg.slices[0].item];
        slot.recv_data[m] =
            static_cast<char*>(x_.targets[item.target]->data) + *msg.in_place;
      } else {
        slot.recv_data[m] = at;
        at += msg.nbytes;
      }
    }
    slot.held.resize(round.reads.size());
    slot.round = &round;
    PostReceives(slot);
    std::lock_guard lock(mu_);
    slot.remaining = round.reads.size();
    ready_ = k + 1;
    cv_.notify_all();
  }

  // Posts the slot's receives as soon as their buffers are laid out, so that
  // peers' slices arrive while this rank still reads (Communicator::PostRecvs;
  // rounds are prepared in order, so receives are posted in order). Where
  // posting is refused (nothing was posted then), the exchanges make this
  // round's and every later round's receives themselves, in order.
  void PostReceives(Slot& slot) {
    slot.posted.reset();
    const ExchangeRound& round = *slot.round;
    if (round.recvs.empty() || !post_early_) return;
    Result<std::unique_ptr<PostedRecvs>> posted =
        x_.comm.PostRecvs(ReceivesOf(slot));
    if (posted.ok()) {
      slot.posted = std::move(*posted);
    } else {
      post_early_ = false;
      Fail(posted.status());
    }
  }

  // The slot's receives: where each of the round's incoming messages lands.
  static std::vector<RecvBuffer> ReceivesOf(const Slot& slot) {
    const ExchangeRound& round = *slot.round;
    std::vector<RecvBuffer> recvs;
    recvs.reserve(round.recvs.size());
    for (size_t m = 0; m < round.recvs.size(); ++m) {
      recvs.push_back(
          {round.recvs[m].peer, slot.recv_data[m], round.recvs[m].nbytes});
    }
    return recvs;
  }

  // Splits round k's reads into batches, in order: consecutive reads, at
  // most kBatchReads of them and, past the first, kBatchBytes of chunks.
  void Batch(size_t k) {
    const auto& reads = plan_.rounds[k].reads;
    auto bytes = [&](size_t j) { return x_.plan.reads[reads[j].read].nbytes; };
    for (size_t j = 0; j < reads.size();) {
      size_t end = j + 1;
      uint64_t total = bytes(j);
      while (end < reads.size() && end - j < kBatchReads &&
             total + bytes(end) <= kBatchBytes) {
        total += bytes(end++);
      }
      batches_.push_back({k, j, end});
      j = end;
    }
  }

  // A reader thread: reads in round order, at most one round ahead of the
  // exchange.
  void ReadLoop() {
    while (true) {
      const size_t b = next_batch_.fetch_add(1);
      if (b >= batches_.size()) return;
      const size_t k = batches_[b].round;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return ready_ > k; });
      }
      RunBatch(b);
    }
  }

  // Reads the next batch of round k on this thread when there is one left.
  bool HelpRead(size_t k) {
    size_t b = next_batch_.load();
    do {
      if (b >= batches_.size() || batches_[b].round != k) return false;
    } while (!next_batch_.compare_exchange_weak(b, b + 1));
    RunBatch(b);
    return true;
  }

  void RunBatch(size_t b) {
    const ReadBatch& batch = batches_[b];
    Slot& slot = slots_[batch.round % 2];
    Fail(ReadAll(slot, batch));
    std::lock_guard lock(mu_);
    slot.remaining -= batch.end - batch.begin;
    if (slot.remaining == 0) cv_.notify_all();
  }

  // Consecutive reads [begin, end) of round `round`, taken by one thread:
  // those read straight to their places go to the store together, so that
  // small chunks side by side in a file cost one system call. Chunks of
  // kBatchBytes or more go alone, shared out among the threads one by one.
  struct ReadBatch {
    size_t round = 0;
    size_t begin = 0, end = 0;
  };
  static constexpr size_t kBatchReads = 64;
  static constexpr uint64_t kBatchBytes = uint64_t{256} << 10;

  Status ReadAll(Slot& slot, const ReadBatch& batch);
  // Appends the places of read j of the slot's round to `pieces` and returns
  // true if it is a read straight to its places: the chunk is one run of a
  // host target, or scattered to host places.
  bool DirectPieces(Slot& slot, size_t j,
                    std::vector<storage::ChunkPiece>* pieces);
  // Read j through a chunk buffer, its slices copied out.
  Status ReadOne(Slot& slot, size_t j);
  Status PlaceCopies(Slot& slot, size_t j, const TensorMetadata& tensor,
                     const ChunkMetadata& chunk, storage::ChunkBuffer buffer);
  void Exchange(Slot& slot);
  void MoveDeviceBoxes(Slot& slot);
  void Land(Slot& slot);

  char* Region(Slot& slot, const ExchangeDeviceBox& box) {
    switch (box.role) {
      case ExchangeDeviceBox::Role::kReader:
        return slot.device->out.data() + box.offset;
      case ExchangeDeviceBox::Role::kInPlace:
        return static_cast<char*>(
                   x_.targets[x_.plan.items[box.item].target]->data) +
               box.offset;
      case ExchangeDeviceBox::Role::kStaged:
        return slot.device->in.data() + box.offset;
      case ExchangeDeviceBox::Role::kNone:
        break;
    }
    return nullptr;
  }

  const LoadExecution& x_;
  const planner::ExchangePlan& plan_;
  const int rank_;
  const std::vector<const TensorMetadata*>& tensor_of_read_;
  Slot slots_[2];
  char* scratch_[2] = {nullptr, nullptr};  // each parity's staged bytes
  std::vector<ReadBatch> batches_;         // every round's, in order
  std::atomic<size_t> next_batch_{0};
  StagingPool staging_;  // host staging for device targets
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0;  // rounds prepared (guarded by mu_)
  // Receives posted as rounds are prepared; not where a device transport
  // moves boxes between exchanges (it may use the communicator itself).
  bool post_early_ = x_.transport == nullptr;
  std::mutex error_mu_;
  Status first_error_;
};

Status Walker::ReadAll(Slot& slot, const ReadBatch& batch) {
  // The direct reads' places, one read after another, and where each read's
  // places begin (its read index j, its first place).
  std::vector<storage::ChunkPiece> pieces;
  pieces.reserve(batch.end - batch.begin);
  std::vector<std::pair<size_t, size_t>> starts;
  starts.reserve(batch.end - batch.begin);
  Status first;
  for (size_t j = batch.begin; j < batch.end; ++j) {
    const size_t begin = pieces.size();
    if (DirectPieces(slot, j, &pieces)) {
      starts.push_back({j, begin});
      continue;
    }
    Status s = ReadOne(slot, j);
    if (first.ok()) first = std::move(s);
  }
  if (starts.empty()) return first;
  // The places are all in: spans of them stay valid.
  std::vector<storage::ChunkToRead> direct(starts.size());
  for (size_t k = 0; k < starts.size(); ++k) {
    const auto [j, begin] = starts[k];
    const size_t end =
        k + 1 < starts.size() ? starts[k + 1].second : pieces.size();
    const planner::ExchangeRead& plan_read = slot.round->reads[j];
    const planner::ChunkRead& read = x_.plan.reads[plan_read.read];
    direct[k] = {read.flat_key,
                 &tensor_of_read_[plan_read.read]->chunks[read.chunk],
                 std::span<const storage::ChunkPiece>(pieces).subspan(
                     begin, end - begin)};
  }
  Status s = x_.store.ReadChunksScattered(x_.meta.info.id, direct);
  return first.ok() ? s : first;
}

bool Walker::DirectPieces(Slot& slot, size_t j,
                          std::vector<storage::ChunkPiece>* pieces) {
  const planner::ExchangeRead& plan_read = slot.round->reads[j];
  if (!plan_read.whole_into_target && plan_read.scatter.empty()) return false;
  if (plan_read.whole_into_target) {
    const planner::ChunkRead& read = x_.plan.reads[plan_read.read];
    const ChunkMetadata& chunk =
        tensor_of_read_[plan_read.read]->chunks[read.chunk];
    const planner::ReadItem& item = x_.plan.items[plan_read.copies[0].item];
    pieces->push_back({static_cast<char*>(x_.targets[item.target]->data) +
                           *plan_read.whole_into_target,
                       static_cast<size_t>(chunk.nbytes)});
    return true;
  }
  for (const planner::ScatterRun& run : plan_read.scatter) {
    char* base = run.to() == ReadCopy::To::kTarget
                     ? static_cast<char*>(x_.targets[run.index]->data)
                     : slot.send_staged[run.index];
    pieces->push_back({base + run.offset, run.nbytes});
  }
  return true;
}

Status Walker::ReadOne(Slot& slot, size_t j) {
  const planner::ExchangeRead& plan_read = slot.round->reads[j];
  const planner::ChunkRead& read = x_.plan.reads[plan_read.read];
  const TensorMetadata& tensor = *tensor_of_read_[plan_read.read];
  const ChunkMetadata& chunk = tensor.chunks[read.chunk];
  CKPTDB_ASSIGN_OR_RETURN(
      storage::ChunkBuffer buffer,
      x_.store.ReadChunk(x_.meta.info.id, read.flat_key, chunk));
  return PlaceCopies(slot, j, tensor, chunk, std::move(buffer));
}

// Copies the boxes of read `j` of the slot's round out of the chunk's
// `buffer`: into host targets, messages and device boxes. The buffer is kept
// for the exchange when a message is sent from it in place.
Status Walker::PlaceCopies(Slot& slot, size_t j, const TensorMetadata& tensor,
                           const ChunkMetadata& chunk,
                           storage::ChunkBuffer buffer) {
  const planner::ExchangeRead& plan_read = slot.round->reads[j];
  const char* bytes = buffer.bytes().data();
  bool keep = false;
  StagingBuffer staging = staging_.Take();
  Status placed;
  for (const ReadCopy& copy : plan_read.copies) {
    const planner::ReadItem& item = x_.plan.items[copy.item];
    const StridedBox src{bytes, chunk.box.shape, item.box.origin};
    const Shape zero(item.box.shape.size(), 0);
    switch (copy.to) {
      case ReadCopy::To::kTarget:
        if (placed.ok()) {
          placed =
              PlaceBox(src, tensor.dtype, *x_.targets[item.target],
                       item.dest_origin, item.box.shape, x_.copier, &staging);
        }
        break;
      case ReadCopy::To::kMessage: {
        const ExchangeMessage& m = slot.round->sends[copy.index];
        if (m.in_place) {  // sent from the chunk buffer, kept until then
          slot.send_data[copy.index] = bytes + *m.in_place;
          keep = true;
          break;
        }
        CopyBox(
            src, tensor.dtype,
            {slot.send_staged[copy.index] + copy.offset, item.box.shape, zero},
            tensor.dtype, item.box.shape);
        break;
      }
      case ReadCopy::To::kDeviceBox: {
        const ExchangeDeviceBox& box = slot.round->boxes[copy.index];
        CopyBox(
            src, tensor.dtype,
            {slot.device->host_out.data() + box.offset, item.box.shape, zero},
            box.dtype, item.box.shape);
        break;
      }
    }
  }
  staging_.Give(std::move(staging));
  if (keep) slot.held[j] = std::move(buffer);
  return placed;
}

// Moves the slot's host messages: every send and receive of the round with
// its peers, point to point.
void Walker::Exchange(Slot& slot) {
  const ExchangeRound& round = *slot.round;
  if (round.sends.empty() && round.recvs.empty()) return;
  std::vector<SendBuffer> sends;
  std::vector<std::vector<char>> lost;  // for chunks whose read failed
  for (size_t m = 0; m < round.sends.size(); ++m) {
    const char* data = slot.send_data[m];
    if (data == nullptr) data = lost.emplace_back(round.sends[m].nbytes).data();
    sends.push_back({round.sends[m].peer, data, round.sends[m].nbytes});
  }
  if (slot.posted != nullptr) {
    Fail(x_.comm.ExchangePosted(sends, std::move(slot.posted)));
  } else {  // none, or not posted early: made here
    Fail(x_.comm.Exchange(sends, ReceivesOf(slot)));
  }
}

// Moves the slot's device boxes: one transport step per tree level that this
// rank takes part in.
void Walker::MoveDeviceBoxes(Slot& slot) {
  const ExchangeRound& round = *slot.round;
  if (round.boxes.empty()) return;
  if (round.device_out_bytes > 0) {
    // The boxes this rank packed go to its device in one copy.
    const Shape all{static_cast<int64_t>(round.device_out_bytes)};
    Fail(x_.copier->BoxToDevice(
        x_.transport->device(), slot.device->host_out.data(),
        {slot.device->out.data(), all, Shape{0}}, 1, all));
  }
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  std::vector<DeviceBroadcast> broadcasts;
  for (int step = 0; step < round.device_steps; ++step) {
    sends.clear();
    recvs.clear();
    broadcasts.clear();
    for (const ExchangeDeviceBox& box : round.boxes) {
      char* region = Region(slot, box);
      if (box.broadcast && step == 0) {
        broadcasts.push_back(
            {x_.plan.reads[box.read].reader_rank, region, box.nbytes});
      }
      for (const planner::DeviceHop& hop : box.hops) {
        if (hop.step != step) continue;
        if (hop.from == rank_) sends.push_back({hop.to, region, box.nbytes});
        if (hop.to == rank_) recvs.push_back({hop.from, region, box.nbytes});
      }
    }
    if (sends.empty() && recvs.empty() && broadcasts.empty()) continue;
    Fail(x_.transport->Run(sends, recvs, broadcasts));
  }
}

// Places what the round staged: host slices received into a buffer, device
// boxes staged on the device.
void Walker::Land(Slot& slot) {
  const ExchangeRound& round = *slot.round;
  if (x_.transport != nullptr) MoveDeviceBoxes(slot);
  StagingBuffer staging = staging_.Take();
  for (size_t m = 0; m < round.recvs.size(); ++m) {
    const ExchangeMessage& msg = round.recvs[m];
    if (msg.in_place) continue;
    for (const planner::ExchangeSlice& s : msg.slices) {
      const planner::ReadItem& item = x_.plan.items[s.item];
      const Shape zero(item.box.shape.size(), 0);
      Fail(PlaceBox({slot.recv_data[m] + s.offset, item.box.shape, zero},
                    tensor_of_read_[item.read]->dtype, *x_.targets[item.target],
                    item.dest_origin, item.box.shape, x_.copier, &staging));
    }
  }
  staging_.Give(std::move(staging));
  for (const ExchangeDeviceBox& box : round.boxes) {
    if (box.role != ExchangeDeviceBox::Role::kStaged) continue;
    const planner::ReadItem& item = x_.plan.items[box.item];
    const TensorView& target = *x_.targets[item.target];
    Fail(x_.copier->DeviceBoxToDevice(
        target.device, Region(slot, box),
        {target.data, target.local_shape, item.dest_origin, target.strides},
        DTypeSize(box.dtype), item.box.shape));
  }
}

}  // namespace

Result<char*> LoadScratch::Reserve(int slot, uint64_t n) {
  if (n > size_[slot]) {
    // The old bytes go before the larger ones are allocated.
    data_[slot].reset();
    size_[slot] = 0;
    try {
      data_[slot].reset(new char[n]);
    } catch (const std::bad_alloc&) {
      return Status::IOError("cannot allocate " + std::to_string(n) +
                             " bytes of host memory for the slices of a "
                             "load's rounds (Options::load_buffer_bytes "
                             "bounds a round)");
    }
    size_[slot] = n;
  }
  return data_[slot].get();
}

Status ExecuteLoad(const LoadExecution& x, LoadStats* stats) {
  const planner::LoadPlan& plan = x.plan;
  const int rank = x.comm.rank();
  const std::vector<const TensorMetadata*> tensor_of_read =
      planner::TensorsOfReads(plan, x.meta.tensors);
  for (const planner::ReadItem& item : plan.items) {
    if (item.dest_rank == rank) {
      stats->bytes_needed +=
          item.num_elements() * DTypeSize(tensor_of_read[item.read]->dtype);
    }
  }
  for (const planner::ChunkRead& read : plan.reads) {
    if (read.reader_rank != rank) continue;
    stats->bytes_read += read.nbytes;
    ++stats->chunks_read;
  }
  std::vector<planner::OwnTarget> own;
  own.reserve(x.targets.size());
  for (const TensorView* view : x.targets) {
    own.push_back({{view->global_offset, view->local_shape},
                   view->dtype,
                   view->device.type == DeviceType::kCPU,
                   view->is_dense()});
  }
  planner::ExchangeInputs in;
  in.rank = rank;
  in.world = x.comm.size();
  in.plan = &plan;
  in.tensor_of_read = &tensor_of_read;
  in.targets = &own;
  in.placements = x.placements;
  in.device_transport = x.transport != nullptr;
  in.window_bytes = std::max<uint64_t>(1, x.round_bytes);
  const planner::ExchangePlan exchange = planner::BuildExchangePlan(in);
  stats->bytes_sent += exchange.host_bytes_sent + exchange.device_bytes_sent;
  stats->device_bytes_sent += exchange.device_bytes_sent;
  const Status walked = Walker(x, exchange, tensor_of_read).Run();
  if (x.comm.size() > 1) return AgreeOnStatus(x.comm, walked);
  return walked;
}

}  // namespace ckptdb::engine
