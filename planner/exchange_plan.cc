#include "planner/exchange_plan.h"

#include <algorithm>
#include <utility>

namespace ckptdb::planner {
namespace {

// A slice of a round crossing ranks, seen from the planning rank.
struct Crossing {
  size_t item;
  int peer;  // the rank it goes to or comes from
  uint64_t bytes;
};

// Lays out the messages of `list` (in item order) by peer: per peer the packed
// batch of small slices first, then each large slice; calls
// placed(k, message index, offset) for list[k].
template <typename Fn>
std::vector<ExchangeMessage> LayOutMessages(const std::vector<Crossing>& list,
                                            uint64_t own_bytes, Fn&& placed) {
  std::map<int, std::vector<size_t>> by_peer;
  for (size_t k = 0; k < list.size(); ++k) by_peer[list[k].peer].push_back(k);
  std::vector<ExchangeMessage> messages;
  for (const auto& [peer, ks] : by_peer) {
    ExchangeMessage batch{peer, 0, true, {}, std::nullopt};
    for (size_t k : ks) {
      if (list[k].bytes >= own_bytes) continue;
      placed(k, messages.size(), batch.nbytes);
      batch.slices.push_back({list[k].item, batch.nbytes, list[k].bytes});
      batch.nbytes += list[k].bytes;
    }
    if (!batch.slices.empty()) messages.push_back(std::move(batch));
    for (size_t k : ks) {
      if (list[k].bytes < own_bytes) continue;
      placed(k, messages.size(), 0);
      messages.push_back({peer,
                          list[k].bytes,
                          false,
                          {{list[k].item, 0, list[k].bytes}},
                          std::nullopt});
    }
  }
  return messages;
}

class Planner {
 public:
  explicit Planner(const ExchangeInputs& in)
      : in_(in),
        plan_(*in.plan),
        rank_(in.rank),
        tensor_of_read_(*in.tensor_of_read) {}

  ExchangePlan Build() {
    size_t i = 0;
    for (size_t r = 0; r < plan_.reads.size(); ++r) {
      const size_t begin = i;
      while (i < plan_.items.size() && plan_.items[i].read == r) ++i;
      CKPTDB_ASSERT(r == 0 ||
                    plan_.reads[r - 1].position <= plan_.reads[r].position);
      AddRead(r, begin, i);
    }
    Finish();
    return std::move(out_);
  }

 private:
  const TensorMetadata& Tensor(size_t read) const {
    return *tensor_of_read_[read];
  }
  uint64_t StoredBytes(const ReadItem& item) const {
    return item.num_elements() * DTypeSize(Tensor(item.read).dtype);
  }
  // The placement of `item`'s target when a device box carries it.
  std::optional<TargetPlacement> DevicePlacement(const ReadItem& item) const {
    if (!in_.device_transport) return std::nullopt;
    TargetPlacement p = in_.placements(item.dest_rank, item.target);
    if (!p.on_device) return std::nullopt;
    return p;
  }

  // The round of read `r`, opened when it is a new one.
  ExchangeRound& RoundOf(size_t r) {
    const uint64_t index = plan_.reads[r].position / in_.window_bytes;
    if (!open_ || round_.index != index) {
      Finish();
      open_ = true;
      round_.index = index;
    }
    return round_;
  }

  void AddRead(size_t r, size_t begin, size_t end) {
    if (plan_.reads[r].reader_rank == rank_) {
      AddOwnRead(r, begin, end);
      return;
    }
    for (size_t i = begin; i < end; ++i) {
      const ReadItem& item = plan_.items[i];
      if (item.dest_rank != rank_) continue;
      if (auto p = DevicePlacement(item)) {
        AddReceivedBox(r, begin, end, i, p->dtype);
      } else {
        RoundOf(r);
        in_list_.push_back({i, plan_.reads[r].reader_rank, StoredBytes(item)});
      }
    }
  }

  // A chunk this rank reads: where each of its items goes.
  void AddOwnRead(size_t r, size_t begin, size_t end) {
    ExchangeRound& round = RoundOf(r);
    ExchangeRead read{r, WholeIntoTarget(r, begin, end), {}};
    const size_t first_box = round.boxes.size();
    bool for_others = false;
    for (size_t i = begin; i < end; ++i) {
      const ReadItem& item = plan_.items[i];
      if (item.dest_rank == rank_) {
        read.copies.push_back({i, ReadCopy::To::kTarget, 0, 0});
        continue;
      }
      for_others = true;
      if (auto p = DevicePlacement(item)) {
        if (size_t b = AddToBox(first_box, r, i, p->dtype); b != SIZE_MAX)
          read.copies.push_back({i, ReadCopy::To::kDeviceBox, b, 0});
        continue;
      }
      out_copy_.emplace_back(round.reads.size(), read.copies.size());
      read.copies.push_back({i, ReadCopy::To::kMessage, 0, 0});
      out_list_.push_back({i, item.dest_rank, StoredBytes(item)});
    }
    if (for_others) round.held_bytes += plan_.reads[r].nbytes;
    round.reads.push_back(std::move(read));
  }

  // The byte of this rank's target where the whole chunk of read `r` lands as
  // stored, when the read's only item is that.
  std::optional<uint64_t> WholeIntoTarget(size_t r, size_t begin,
                                          size_t end) const {
    if (end - begin != 1) return std::nullopt;
    const ReadItem& item = plan_.items[begin];
    const TensorMetadata& tensor = Tensor(r);
    if (item.dest_rank != rank_ ||
        item.box.shape != tensor.chunks[plan_.reads[r].chunk].box.shape)
      return std::nullopt;
    return LandsInPlace(item, tensor.dtype);
  }

  // The byte of this rank's target where `item` lands as one run of `dtype`
  // values, when the target is on the host and of that dtype.
  std::optional<uint64_t> LandsInPlace(const ReadItem& item,
                                       DType dtype) const {
    const OwnTarget& target = (*in_.targets)[item.target];
    if (!target.on_host || !target.dense || target.dtype != dtype)
      return std::nullopt;
    return ContiguousRun(target.box.shape, item.dest_origin, item.box.shape,
                         DTypeSize(dtype));
  }

  // Adds item `i` of read `r` (read by this rank) to its device box among the
  // round's boxes from `first_box` on. Returns the box's index when the item
  // opened it (the reader packs the box from it), SIZE_MAX otherwise.
  size_t AddToBox(size_t first_box, size_t r, size_t i, DType dtype) {
    const ReadItem& item = plan_.items[i];
    for (size_t b = first_box; b < round_.boxes.size(); ++b) {
      ExchangeDeviceBox& box = round_.boxes[b];
      const ReadItem& first = plan_.items[box.item];
      if (box.dtype == dtype && first.box == item.box) {
        box.receivers.push_back(item.dest_rank);
        return SIZE_MAX;
      }
    }
    ExchangeDeviceBox& box = round_.boxes.emplace_back();
    box.read = r;
    box.dtype = dtype;
    box.nbytes = item.num_elements() * DTypeSize(dtype);
    box.receivers.push_back(item.dest_rank);
    box.role = ExchangeDeviceBox::Role::kReader;
    box.item = i;
    return round_.boxes.size() - 1;
  }

  // Item `mine` of read `r` (read by another rank) comes in a device box of
  // `dtype`: its receivers are every item of the read with the same box and
  // target dtype.
  void AddReceivedBox(size_t r, size_t begin, size_t end, size_t mine,
                      DType dtype) {
    ExchangeRound& round = RoundOf(r);
    const ReadItem& item = plan_.items[mine];
    ExchangeDeviceBox& box = round.boxes.emplace_back();
    box.read = r;
    box.dtype = dtype;
    box.nbytes = item.num_elements() * DTypeSize(dtype);
    for (size_t i = begin; i < end; ++i) {
      const ReadItem& other = plan_.items[i];
      if (other.dest_rank == plan_.reads[r].reader_rank ||
          other.box != item.box)
        continue;
      auto p = DevicePlacement(other);
      if (p && p->dtype == dtype) box.receivers.push_back(other.dest_rank);
    }
    box.item = mine;
    const OwnTarget& target = (*in_.targets)[item.target];
    std::optional<uint64_t> run;
    if (target.dense) {
      run = ContiguousRun(target.box.shape, item.dest_origin, item.box.shape,
                          DTypeSize(dtype));
    }
    if (run) {
      box.role = ExchangeDeviceBox::Role::kInPlace;
      box.offset = *run;
    } else {
      box.role = ExchangeDeviceBox::Role::kStaged;
      box.offset = round.device_in_bytes;
      round.device_in_bytes += box.nbytes;
    }
  }

  // Routes the open round's boxes and lays out its messages.
  void Finish() {
    if (!open_) return;
    open_ = false;
    ExchangeRound& round = round_;
    for (ExchangeDeviceBox& box : round.boxes) RouteBox(box);
    round.sends = LayOutMessages(
        out_list_, in_.own_message_bytes,
        [&](size_t k, size_t m, uint64_t offset) {
          ReadCopy& copy =
              round.reads[out_copy_[k].first].copies[out_copy_[k].second];
          copy.index = m;
          copy.offset = offset;
        });
    for (ExchangeMessage& m : round.sends) {
      out_.host_bytes_sent += m.nbytes;
      if (m.packed) continue;
      const ReadItem& item = plan_.items[m.slices[0].item];
      const TensorMetadata& tensor = Tensor(item.read);
      m.in_place = ContiguousRun(
          tensor.chunks[plan_.reads[item.read].chunk].box.shape,
          item.box.origin, item.box.shape, DTypeSize(tensor.dtype));
    }
    round.recvs = LayOutMessages(in_list_, in_.own_message_bytes,
                                 [](size_t, size_t, uint64_t) {});
    for (ExchangeMessage& m : round.recvs) {
      if (!m.packed) {
        const ReadItem& item = plan_.items[m.slices[0].item];
        m.in_place = LandsInPlace(item, Tensor(item.read).dtype);
      }
      if (!m.in_place) round.held_bytes += m.nbytes;
    }
    for (ExchangeRead& read : round.reads) read.scatter = PlanScatter(read);
    out_list_.clear();
    in_list_.clear();
    out_copy_.clear();
    out_.rounds.push_back(std::move(round));
    round = ExchangeRound();
  }

  // The runs of a read straight into its places (ExchangeRead::scatter), or
  // none where some byte goes to no place, to a device, in another dtype, or
  // out of the chunk buffer (an in-place send), or where runs are short.
  std::vector<ScatterRun> PlanScatter(const ExchangeRead& read) const {
    if (read.whole_into_target || read.copies.empty()) return {};
    const TensorMetadata& tensor = Tensor(read.read);
    const ChunkMetadata& chunk = tensor.chunks[plan_.reads[read.read].chunk];
    if (chunk.nbytes >= kMaxScatterChunkBytes) return {};
    const size_t elem = DTypeSize(tensor.dtype);
    // Few enough runs once joined; before joining, a bound on planning work.
    const uint64_t most_runs = chunk.nbytes / in_.min_scatter_run_bytes;
    const uint64_t most_unjoined = kUnjoinedRunsPerRun * most_runs + 16;
    // (byte within the chunk, run)
    std::vector<std::pair<uint64_t, ScatterRun>> runs;
    for (const ReadCopy& copy : read.copies) {
      const ReadItem& item = plan_.items[copy.item];
      // Where this copy's runs go: a place and the byte they start from.
      ScatterRun to;
      const Shape* dst_shape = &item.box.shape;
      Shape dst_offset(item.box.shape.size(), 0);
      size_t index = 0;
      if (copy.to == ReadCopy::To::kTarget) {
        const OwnTarget& target = (*in_.targets)[item.target];
        if (!target.on_host || !target.dense || target.dtype != tensor.dtype)
          return {};
        index = item.target;
        dst_shape = &target.box.shape;
        dst_offset = item.dest_origin;
      } else if (copy.to == ReadCopy::To::kMessage) {
        if (round_.sends[copy.index].in_place) return {};
        index = copy.index;
        to.offset = copy.offset;
        to.into_message = 1;
      } else {
        return {};
      }
      if (index > UINT32_MAX) return {};
      to.index = static_cast<uint32_t>(index);
      ForEachRunPair(chunk.box.shape, item.box.origin, *dst_shape, dst_offset,
                     item.box.shape, elem, [&](const RunPair& p) {
                       ScatterRun run = to;
                       run.offset += p.dst;
                       run.nbytes = static_cast<uint32_t>(p.nbytes);
                       runs.push_back({p.src, run});
                     });
      if (runs.size() > most_unjoined) return {};
    }
    std::vector<ScatterRun> joined = JoinRuns(std::move(runs), chunk.nbytes);
    if (joined.size() > most_runs) return {};
    return joined;
  }

  // `runs` in chunk order with neighbours that continue each other joined;
  // none unless they cover the chunk's `nbytes` once.
  static std::vector<ScatterRun> JoinRuns(
      std::vector<std::pair<uint64_t, ScatterRun>> runs, uint64_t nbytes) {
    std::sort(runs.begin(), runs.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<ScatterRun> joined;
    uint64_t at = 0;
    for (const auto& [from, run] : runs) {
      if (from != at) return {};  // a gap, or bytes with two places
      at += run.nbytes;
      ScatterRun* last = joined.empty() ? nullptr : &joined.back();
      if (last != nullptr && last->into_message == run.into_message &&
          last->index == run.index &&
          last->offset + last->nbytes == run.offset) {
        // Within the chunk: below kMaxScatterChunkBytes.
        last->nbytes += run.nbytes;
      } else {
        joined.push_back(run);
      }
    }
    if (at != nbytes) return {};
    joined.shrink_to_fit();  // kept in the plan
    return joined;
  }

  // Gives a box its route and, when this rank reads it, its place in the
  // outgoing buffer; counts what this rank sends.
  void RouteBox(ExchangeDeviceBox& box) {
    const int reader = plan_.reads[box.read].reader_rank;
    box.broadcast = box.receivers.size() >= 2 &&
                    box.receivers.size() == static_cast<size_t>(in_.world - 1);
    uint64_t sends = 0;
    if (box.broadcast) {
      round_.device_steps = std::max(round_.device_steps, 1);
      sends = reader == rank_;
    } else {
      box.hops = DeviceHops(reader, box.receivers);
      for (const DeviceHop& hop : box.hops) {
        if (hop.from == rank_ || hop.to == rank_)
          round_.device_steps = std::max(round_.device_steps, hop.step + 1);
        sends += hop.from == rank_;
      }
    }
    out_.device_bytes_sent += sends * box.nbytes;
    if (box.role == ExchangeDeviceBox::Role::kReader) {
      box.offset = round_.device_out_bytes;
      round_.device_out_bytes += box.nbytes;
    }
  }

  const ExchangeInputs& in_;
  const LoadPlan& plan_;
  const int rank_;
  const std::vector<const TensorMetadata*>& tensor_of_read_;  // by read
  ExchangePlan out_;
  // The round being built.
  bool open_ = false;
  ExchangeRound round_;
  std::vector<Crossing> out_list_, in_list_;  // its host slices, item order
  // Per out_list_ entry: its ReadCopy, as (round_.reads index, copies index).
  std::vector<std::pair<size_t, size_t>> out_copy_;
};

}  // namespace

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

ExchangePlan BuildExchangePlan(const ExchangeInputs& in) {
  CKPTDB_ASSERT(in.window_bytes > 0 && in.min_scatter_run_bytes > 0);
  return Planner(in).Build();
}

}  // namespace ckptdb::planner
