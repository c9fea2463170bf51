#include "engine/src/load_executor.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "engine/src/box_copy.h"
#include "engine/src/device.h"
#include "engine/src/parallel.h"
#include "engine/src/wire.h"

namespace ckptdb::engine {
namespace {

// Slices of at least this many bytes travel as messages of their own (and may
// land in place); smaller slices for one peer are packed into one message.
constexpr uint64_t kOwnMessageBytes = uint64_t{256} << 10;

// The items of each read: plan.items[begin(r), end(r)).
class ItemRanges {
 public:
  explicit ItemRanges(const planner::LoadPlan& plan)
      : first_(plan.reads.size() + 1, plan.items.size()) {
    for (size_t i = plan.items.size(); i-- > 0;) first_[plan.items[i].read] = i;
    for (size_t r = plan.reads.size(); r-- > 0;)
      first_[r] = std::min(first_[r], first_[r + 1]);
  }
  size_t begin(size_t read) const { return first_[read]; }
  size_t end(size_t read) const { return first_[read + 1]; }

 private:
  std::vector<size_t> first_;
};

DType StoredDType(const CheckpointMetadata& meta, const planner::LoadPlan& plan,
                  const planner::ReadItem& item) {
  return meta.tensors.at(plan.reads[item.read].flat_key).dtype;
}

uint64_t ItemBytes(const CheckpointMetadata& meta,
                   const planner::LoadPlan& plan,
                   const planner::ReadItem& item) {
  return item.num_elements() * DTypeSize(StoredDType(meta, plan, item));
}

// One message of a round between this rank and a peer: a packed batch of small
// slices, or one large slice.
struct Message {
  std::vector<char> staged;    // packed bytes (unless sent/received in place)
  char* in_place = nullptr;    // received straight into a target
  const char* from = nullptr;  // sent straight from a read chunk
  uint64_t nbytes = 0;
};

// Where a slice sits in the messages of a round.
struct SliceSlot {
  Message* message;
  uint64_t offset;  // within the message
  bool own;         // the message holds this slice alone
};

// A slice of this round that crosses ranks, seen from this rank.
struct Crossing {
  size_t item;
  int peer;  // the rank it goes to or comes from
  uint64_t bytes;
  bool own() const { return bytes >= kOwnMessageBytes; }
};

// The messages of one round with each peer, in the order both ends post them:
// the batch first, then the large slices in item order.
struct PeerMessages {
  Message batch;
  std::vector<Message> own;
};

// A box for device targets of other ranks (DeviceTransport): the slices of
// one read with the same box and target dtype, seen from this rank.
struct DeviceBox {
  size_t read;
  size_t first_item;  // the reader packs the box for this item
  DType dtype;        // of the targets: what travels
  uint64_t bytes;
  std::vector<int> receivers;  // in item order
  std::vector<size_t> items;   // parallel to receivers
  bool broadcast = false;      // every other rank receives it
  std::vector<DeviceHop> hops;
  // This rank's copy of the box: packed in the outgoing buffer (reader),
  // received in place in its target, or staged in the incoming buffer.
  char* region = nullptr;
  uint64_t offset = 0;            // in the outgoing or incoming buffer
  size_t staged_item = SIZE_MAX;  // this rank's item, when staged
};

// Buffers of a load's device route, reused across rounds.
struct DeviceRoute {
  DeviceRoute(DeviceCopier* copier, Device device)
      : copier(copier), out(copier, device), in(copier, device) {}
  DeviceCopier* copier;
  DeviceBuffer out, in;    // device memory: boxes sent, boxes staged
  StagingBuffer host_out;  // pinned: boxes packed by the reader
};

class Round {
 public:
  Round(const LoadExecution& x, const ItemRanges& ranges, StagingPool* staging,
        DeviceRoute* route, LoadStats* stats)
      : x_(x),
        ranges_(ranges),
        staging_(staging),
        route_(route),
        stats_(stats),
        rank_(x.comm.rank()) {}

  // `deferred` carries a failure to place received slices: it joins the next
  // agreement (this round's below, or the load's last), not a collective of
  // its own every round.
  Status Run(const std::vector<size_t>& reads, Status* deferred) {
    Status executed = Layout(reads);
    if (executed.ok()) {
      executed = ParallelFor(mine_.size(), x_.io_threads,
                             [&](size_t k) { return ReadOne(k); });
    }
    if (executed.ok() && out_bytes_ > 0) {
      // The boxes this rank sends, packed, go to its device in one copy.
      const Shape all{static_cast<int64_t>(out_bytes_)};
      executed = route_->copier->BoxToDevice(
          x_.transport->device(), route_->host_out.data(),
          {route_->out.data(), all, Shape{0}}, 1, all);
    }
    if (x_.comm.size() == 1) return executed;
    // Agree before exchanging, so that no rank waits for slices a failed
    // reader never sends.
    if (executed.ok()) executed = std::exchange(*deferred, Status::OK());
    RETURN_IF_ERROR(AgreeOnStatus(x_.comm, executed));
    std::vector<SendBuffer> sends;
    std::vector<RecvBuffer> recvs;
    for (auto& [peer, m] : out_) {
      if (m.batch.nbytes > 0)
        sends.push_back({peer, m.batch.staged.data(), m.batch.nbytes});
      for (Message& own : m.own) {
        sends.push_back(
            {peer, own.from ? own.from : own.staged.data(), own.nbytes});
      }
    }
    for (auto& [peer, m] : in_) {
      if (m.batch.nbytes > 0)
        recvs.push_back({peer, m.batch.staged.data(), m.batch.nbytes});
      for (Message& own : m.own) {
        recvs.push_back({peer, own.in_place ? own.in_place : own.staged.data(),
                         own.nbytes});
      }
    }
    RETURN_IF_ERROR(AgreeOnStatus(x_.comm, x_.comm.Exchange(sends, recvs)));
    RETURN_IF_ERROR(MoveDeviceBoxes());
    StagingBuffer staging = staging_->Take();
    Status placed;
    for (const auto& [i, slot] : incoming_) {
      if (slot.message->in_place) continue;
      const planner::ReadItem& item = x_.plan.items[i];
      const Shape zero(item.lengths.size(), 0);
      placed = PlaceBox(
          {slot.message->staged.data() + slot.offset, item.lengths, zero},
          StoredDType(x_.meta, x_.plan, item), *x_.targets[item.target],
          item.dest_offset, item.lengths, &staging);
      if (!placed.ok()) break;
    }
    staging_->Give(std::move(staging));
    for (const DeviceBox& box : boxes_) {
      if (!placed.ok()) break;
      if (box.staged_item == SIZE_MAX) continue;
      const planner::ReadItem& item = x_.plan.items[box.staged_item];
      const TensorView& target = *x_.targets[item.target];
      placed = route_->copier->DeviceBoxToDevice(
          target.device, box.region,
          {target.data, target.local_shape, item.dest_offset},
          DTypeSize(box.dtype), item.lengths);
    }
    *deferred = placed;
    return Status::OK();
  }

 private:
  // Decides where every slice of this round crossing ranks travels: sizes the
  // packed batches and large-slice messages of both directions.
  Status Layout(const std::vector<size_t>& reads) {
    const planner::LoadPlan& plan = x_.plan;
    // Pointers into PeerMessages::own stay valid only once the vectors stop
    // growing: slots are resolved after counting.
    std::vector<Crossing> out, in;
    for (size_t read : reads) {
      const int reader = plan.reads[read].reader_rank;
      if (reader == rank_) mine_.push_back(read);
      const size_t first_box = boxes_.size();
      for (size_t i = ranges_.begin(read); i < ranges_.end(read); ++i) {
        const planner::ReadItem& item = plan.items[i];
        if (item.dest_rank == reader) continue;
        const TargetPlacement& placement =
            x_.placements[item.dest_rank][item.target];
        if (x_.transport != nullptr && placement.on_device) {
          AddToDeviceBox(first_box, i, placement.dtype);
          continue;
        }
        const uint64_t bytes = ItemBytes(x_.meta, plan, item);
        if (reader == rank_) {
          out.push_back({i, item.dest_rank, bytes});
          stats_->bytes_sent += bytes;
        } else if (item.dest_rank == rank_) {
          in.push_back({i, reader, bytes});
        }
      }
    }
    // Sizes every peer's messages, then gives each slice its place in them.
    auto place = [](const std::vector<Crossing>& list,
                    std::map<int, PeerMessages>& peers, auto&& add) {
      for (const Crossing& c : list) {
        PeerMessages& m = peers[c.peer];
        if (c.own()) {
          m.own.emplace_back().nbytes = c.bytes;
        } else {
          m.batch.nbytes += c.bytes;
        }
      }
      struct Cursor {
        uint64_t batch_offset = 0;
        size_t next_own = 0;
      };
      std::map<int, Cursor> cursors;
      for (const Crossing& c : list) {
        PeerMessages& m = peers[c.peer];
        Cursor& at = cursors[c.peer];
        if (c.own()) {
          add(c.item, SliceSlot{&m.own[at.next_own++], 0, true});
        } else {
          add(c.item, SliceSlot{&m.batch, at.batch_offset, false});
          at.batch_offset += c.bytes;
        }
      }
    };
    place(out, out_,
          [&](size_t i, SliceSlot slot) { outgoing_.emplace(i, slot); });
    place(in, in_,
          [&](size_t i, SliceSlot slot) { incoming_.emplace_back(i, slot); });

    // Large slices land in place when the target holds them as one run of the
    // stored dtype; everything else is staged.
    for (auto& [i, slot] : incoming_) {
      const planner::ReadItem& item = plan.items[i];
      TensorView& view = *x_.targets[item.target];
      std::optional<size_t> run;
      if (slot.own && view.device.type == DeviceType::kCPU &&
          view.dtype == StoredDType(x_.meta, plan, item)) {
        run = ContiguousRun(view.local_shape, item.dest_offset, item.lengths,
                            DTypeSize(view.dtype));
      }
      if (run) {
        slot.message->in_place = static_cast<char*>(view.data) + *run;
      } else {
        slot.message->staged.resize(slot.message->nbytes);
      }
    }
    for (auto& [peer, m] : out_) m.batch.staged.resize(m.batch.nbytes);
    held_.resize(mine_.size());
    return LayOutDeviceBoxes();
  }

  // Adds item `i` (for a device target of dtype `dtype`) to the box of this
  // read's boxes (from `first_box` on) with the same box and dtype, or to a new
  // one.
  void AddToDeviceBox(size_t first_box, size_t i, DType dtype) {
    const planner::ReadItem& item = x_.plan.items[i];
    for (size_t b = first_box; b < boxes_.size(); ++b) {
      DeviceBox& box = boxes_[b];
      const planner::ReadItem& first = x_.plan.items[box.first_item];
      if (box.dtype == dtype && first.storage_offset == item.storage_offset &&
          first.lengths == item.lengths) {
        box.receivers.push_back(item.dest_rank);
        box.items.push_back(i);
        box_of_item_.emplace(i, b);
        return;
      }
    }
    DeviceBox& box = boxes_.emplace_back();
    box.read = item.read;
    box.first_item = i;
    box.dtype = dtype;
    box.bytes = item.num_elements() * DTypeSize(dtype);
    box.receivers.push_back(item.dest_rank);
    box.items.push_back(i);
    box_of_item_.emplace(i, boxes_.size() - 1);
  }

  // Gives every device box its route (a broadcast when every other rank needs
  // it, else binomial-tree hops) and this rank's copy of it its place.
  Status LayOutDeviceBoxes() {
    const planner::LoadPlan& plan = x_.plan;
    const int world = x_.comm.size();
    uint64_t in_bytes = 0;
    std::vector<DeviceBox*> staged;
    for (size_t b = 0; b < boxes_.size(); ++b) {
      DeviceBox& box = boxes_[b];
      const int reader = plan.reads[box.read].reader_rank;
      box.broadcast = box.receivers.size() >= 2 &&
                      box.receivers.size() == static_cast<size_t>(world - 1);
      if (!box.broadcast) box.hops = DeviceHops(reader, box.receivers);
      for (const DeviceHop& hop : box.hops)
        steps_ = std::max(steps_, hop.step + 1);
      if (box.broadcast) steps_ = std::max(steps_, 1);
      uint64_t sends = box.broadcast && reader == rank_ ? 1 : 0;
      for (const DeviceHop& hop : box.hops) sends += hop.from == rank_;
      stats_->bytes_sent += sends * box.bytes;
      stats_->device_bytes_sent += sends * box.bytes;
      if (reader == rank_) {
        box.offset = out_bytes_;
        out_bytes_ += box.bytes;
        continue;
      }
      const size_t k = static_cast<size_t>(
          std::find(box.receivers.begin(), box.receivers.end(), rank_) -
          box.receivers.begin());
      if (k == box.receivers.size()) continue;
      const size_t i = box.items[k];
      const planner::ReadItem& item = plan.items[i];
      TensorView& view = *x_.targets[item.target];
      std::optional<size_t> run =
          ContiguousRun(view.local_shape, item.dest_offset, item.lengths,
                        DTypeSize(box.dtype));
      if (run) {
        box.region = static_cast<char*>(view.data) + *run;
      } else {
        box.offset = in_bytes;
        box.staged_item = i;
        in_bytes += box.bytes;
        staged.push_back(&box);
      }
    }
    if (out_bytes_ > 0) {
      route_->host_out.Reserve(route_->copier, out_bytes_);
      RETURN_IF_ERROR(route_->out.Reserve(out_bytes_));
      for (DeviceBox& box : boxes_) {
        if (plan.reads[box.read].reader_rank == rank_)
          box.region = route_->out.data() + box.offset;
      }
    }
    if (in_bytes > 0) {
      RETURN_IF_ERROR(route_->in.Reserve(in_bytes));
      for (DeviceBox* box : staged)
        box->region = route_->in.data() + box->offset;
    }
    return Status::OK();
  }

  // Moves the device boxes of this round: one transport step per tree level,
  // every step agreed on, so that no rank waits on a failed peer.
  Status MoveDeviceBoxes() {
    std::vector<SendBuffer> sends;
    std::vector<RecvBuffer> recvs;
    std::vector<DeviceBroadcast> broadcasts;
    for (int step = 0; step < steps_; ++step) {
      sends.clear();
      recvs.clear();
      broadcasts.clear();
      for (const DeviceBox& box : boxes_) {
        if (box.broadcast && step == 0) {
          broadcasts.push_back(
              {x_.plan.reads[box.read].reader_rank, box.region, box.bytes});
        }
        for (const DeviceHop& hop : box.hops) {
          if (hop.step != step) continue;
          if (hop.from == rank_)
            sends.push_back({hop.to, box.region, box.bytes});
          if (hop.to == rank_)
            recvs.push_back({hop.from, box.region, box.bytes});
        }
      }
      RETURN_IF_ERROR(
          AgreeOnStatus(x_.comm, x_.transport->Run(sends, recvs, broadcasts)));
    }
    return Status::OK();
  }

  // Where the whole chunk of read `r` lands as it is stored: the read's only
  // slice is the whole chunk, for a host target of this rank of the stored
  // dtype that holds it as one run. nullptr otherwise.
  char* WholeChunkTarget(size_t r, const ChunkMetadata& chunk, DType dtype) {
    if (ranges_.end(r) - ranges_.begin(r) != 1) return nullptr;
    const planner::ReadItem& item = x_.plan.items[ranges_.begin(r)];
    if (item.dest_rank != rank_ || item.lengths != chunk.local_shape)
      return nullptr;
    TensorView& view = *x_.targets[item.target];
    if (view.device.type != DeviceType::kCPU || view.dtype != dtype)
      return nullptr;
    std::optional<size_t> run = ContiguousRun(
        view.local_shape, item.dest_offset, item.lengths, DTypeSize(dtype));
    return run ? static_cast<char*>(view.data) + *run : nullptr;
  }

  // Reads the k-th chunk this rank reads in this round and places its slices.
  Status ReadOne(size_t k) {
    const planner::LoadPlan& plan = x_.plan;
    const size_t read_index = mine_[k];
    const planner::ChunkRead& read = plan.reads[read_index];
    const TensorMetadata& tensor = x_.meta.tensors.at(read.flat_key);
    const ChunkMetadata& chunk = tensor.chunks[read.chunk];
    if (char* whole = WholeChunkTarget(read_index, chunk, tensor.dtype)) {
      // The chunk is one run of a host target of this rank: no buffer.
      return x_.store.ReadChunkInto(x_.meta.info.id, read.flat_key, chunk,
                                    whole);
    }
    ASSIGN_OR_RETURN(storage::ChunkBuffer buffer,
                     x_.store.ReadChunk(x_.meta.info.id, read.flat_key, chunk));
    const char* bytes = buffer.bytes().data();
    bool keep = false;
    StagingBuffer staging = staging_->Take();
    Status placed;
    for (size_t i = ranges_.begin(read_index); i < ranges_.end(read_index);
         ++i) {
      const planner::ReadItem& item = plan.items[i];
      const StridedBox src{bytes, chunk.local_shape, item.storage_offset};
      if (item.dest_rank == rank_) {
        placed = PlaceBox(src, tensor.dtype, *x_.targets[item.target],
                          item.dest_offset, item.lengths, &staging);
        if (!placed.ok()) break;
        continue;
      }
      if (auto box = box_of_item_.find(i); box != box_of_item_.end()) {
        const DeviceBox& b = boxes_[box->second];
        if (b.first_item != i) continue;  // packed once for all receivers
        const Shape zero(item.lengths.size(), 0);
        CopyBox(src, tensor.dtype,
                {route_->host_out.data() + b.offset, item.lengths, zero},
                b.dtype, item.lengths);
        continue;
      }
      const SliceSlot& slot = outgoing_.at(i);
      if (slot.own) {
        std::optional<size_t> run =
            ContiguousRun(chunk.local_shape, item.storage_offset, item.lengths,
                          DTypeSize(tensor.dtype));
        if (run) {  // sent from the chunk buffer, kept until the exchange ends
          slot.message->from = bytes + *run;
          keep = true;
          continue;
        }
        slot.message->staged.resize(slot.message->nbytes);
      }
      const Shape zero(item.lengths.size(), 0);
      CopyBox(src, tensor.dtype,
              {slot.message->staged.data() + slot.offset, item.lengths, zero},
              tensor.dtype, item.lengths);
    }
    staging_->Give(std::move(staging));
    if (keep) held_[k] = std::move(buffer);
    return placed;
  }

  const LoadExecution& x_;
  const ItemRanges& ranges_;
  StagingPool* staging_;  // host staging for device targets
  DeviceRoute* route_;    // set when x_.transport is
  LoadStats* stats_;
  const int rank_;
  std::vector<size_t> mine_;              // reads of this round this rank reads
  std::map<int, PeerMessages> out_, in_;  // by peer rank
  std::unordered_map<size_t, SliceSlot> outgoing_;      // by item index
  std::vector<std::pair<size_t, SliceSlot>> incoming_;  // item index, slot
  std::vector<storage::ChunkBuffer> held_;  // chunks sent from in place
  std::vector<DeviceBox> boxes_;            // in plan order, on every rank
  std::unordered_map<size_t, size_t> box_of_item_;  // item index -> box
  uint64_t out_bytes_ = 0;  // boxes this rank reads for device targets
  int steps_ = 0;           // transport steps of this round
};

}  // namespace

namespace {

std::vector<std::vector<size_t>> AssignRounds(const CheckpointMetadata& meta,
                                              const planner::LoadPlan& plan,
                                              const ItemRanges& ranges,
                                              int world, uint64_t round_bytes) {
  std::vector<std::vector<size_t>> rounds;
  std::vector<std::vector<uint64_t>> held(world);  // [rank][round]
  std::vector<size_t> first_open(world, 0);        // rounds before it are full
  std::vector<std::pair<int, uint64_t>> costs;
  for (size_t r = 0; r < plan.reads.size(); ++r) {
    const int reader = plan.reads[r].reader_rank;
    costs.clear();
    for (size_t i = ranges.begin(r); i < ranges.end(r); ++i) {
      const planner::ReadItem& item = plan.items[i];
      if (item.dest_rank == reader) continue;
      const uint64_t bytes = ItemBytes(meta, plan, item);
      if (!costs.empty() && costs.back().first == item.dest_rank) {
        costs.back().second += bytes;  // items are sorted by dest rank
      } else {
        costs.emplace_back(item.dest_rank, bytes);
      }
    }
    // A chunk read for others is held (or packed) until the exchange.
    if (!costs.empty()) costs.emplace_back(reader, plan.reads[r].nbytes);
    size_t round = 0;
    for (const auto& [rank, _] : costs)
      round = std::max(round, first_open[rank]);
    auto fits = [&](size_t round) {
      for (const auto& [rank, bytes] : costs) {
        const uint64_t now = round < held[rank].size() ? held[rank][round] : 0;
        if (now > 0 && now + bytes > round_bytes) return false;
      }
      return true;
    };
    while (!fits(round)) ++round;
    if (round >= rounds.size()) rounds.resize(round + 1);
    rounds[round].push_back(r);
    for (const auto& [rank, bytes] : costs) {
      std::vector<uint64_t>& h = held[rank];
      if (round >= h.size()) h.resize(round + 1, 0);
      h[round] += bytes;
      while (first_open[rank] < h.size() && h[first_open[rank]] >= round_bytes)
        ++first_open[rank];
    }
  }
  return rounds;
}

}  // namespace

std::vector<std::vector<size_t>> AssignRounds(const CheckpointMetadata& meta,
                                              const planner::LoadPlan& plan,
                                              int world, uint64_t round_bytes) {
  return AssignRounds(meta, plan, ItemRanges(plan), world, round_bytes);
}

std::vector<DeviceHop> DeviceHops(int reader,
                                  const std::vector<int>& receivers) {
  std::vector<DeviceHop> hops;
  std::vector<int> holders{reader};
  size_t next = 0;
  for (int step = 0; next < receivers.size(); ++step) {
    const size_t holding = holders.size();
    for (size_t h = 0; h < holding && next < receivers.size(); ++h) {
      hops.push_back({step, holders[h], receivers[next]});
      holders.push_back(receivers[next++]);
    }
  }
  return hops;
}

Status ExecuteLoad(const LoadExecution& x, LoadStats* stats) {
  const planner::LoadPlan& plan = x.plan;
  const int rank = x.comm.rank();
  for (const planner::ReadItem& item : plan.items) {
    if (item.dest_rank == rank)
      stats->bytes_needed += ItemBytes(x.meta, plan, item);
  }
  for (const planner::ChunkRead& read : plan.reads) {
    if (read.reader_rank != rank) continue;
    stats->bytes_read += read.nbytes;
    ++stats->chunks_read;
  }
  const ItemRanges ranges(plan);
  StagingPool staging;
  std::optional<DeviceRoute> route;
  if (x.transport != nullptr)
    route.emplace(CurrentDeviceCopier(), x.transport->device());
  Status deferred;
  for (const std::vector<size_t>& reads :
       AssignRounds(x.meta, plan, ranges, x.comm.size(), x.round_bytes)) {
    RETURN_IF_ERROR(Round(x, ranges, &staging, route ? &*route : nullptr, stats)
                        .Run(reads, &deferred));
  }
  if (x.comm.size() > 1) return AgreeOnStatus(x.comm, deferred);
  return Status::OK();
}

}  // namespace ckptdb::engine
