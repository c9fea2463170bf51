// Property tests of BuildExchangePlan: random tensors, chunkings and target
// layouts (some on devices) over 1..6 ranks and random windows; every rank's
// exchange plan, built from the global load plan, checked against brute-force
// references, and built again from the rank's per-rank plan.
#include "planner/exchange_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "core/random_boxes.h"

namespace ckptdb::planner {
namespace {

using testing::RandomPartition;

using testing::ForEachElement;
using testing::Linear;

// Brute force: the byte where box [offset, offset + lengths) of an array of
// `shape` starts when its elements are consecutive in memory, else nullopt.
std::optional<uint64_t> BruteRun(const Shape& shape, const Shape& offset,
                                 const Shape& lengths, size_t elem) {
  std::optional<int64_t> first, last;
  bool consecutive = true;
  ForEachElement(Box{offset, lengths}, [&](const Shape& x) {
    const int64_t at = Linear(shape, x);
    if (last && at != *last + 1) consecutive = false;
    if (!first) first = at;
    last = at;
  });
  if (!first) return 0;
  if (!consecutive) return std::nullopt;
  return static_cast<uint64_t>(*first) * elem;
}

// A random load: stored chunks, targets on `world` ranks (placements and own
// target layouts), a global plan.
struct Case {
  int world = 1;
  std::map<std::string, TensorMetadata> tensors;
  std::vector<std::vector<LoadTarget>> targets;
  std::vector<std::vector<OwnTarget>> own;
  std::vector<std::vector<TargetPlacement>> placements;
  bool transport = false;
  uint64_t window = 1;
  uint64_t own_bytes = 1;
  uint64_t min_run = 1;
  LoadPlan plan;
  uint64_t max_chunk = 0;
};

Case RandomCase(std::mt19937& rng) {
  static const DType kTypes[] = {DType::kFloat32, DType::kBFloat16,
                                 DType::kInt8, DType::kFloat64};
  Case c;
  c.world = 1 + static_cast<int>(rng() % 6);
  c.transport = rng() % 2;
  c.targets.resize(c.world);
  c.own.resize(c.world);
  c.placements.resize(c.world);
  const int num_tensors = 1 + static_cast<int>(rng() % 4);
  const bool host_only = rng() % 3 == 0;
  uint64_t total = 0;
  for (int t = 0; t < num_tensors; ++t) {
    const std::string key = std::string("t").append(std::to_string(t));
    TensorMetadata meta{kTypes[rng() % 4], {}, {}};
    const int ndim = static_cast<int>(rng() % 4);
    for (int d = 0; d < ndim; ++d)
      meta.global_shape.push_back(1 + static_cast<int64_t>(rng() % 9));
    const Box whole{Shape(ndim, 0), meta.global_shape};
    std::vector<Box> cells;
    RandomPartition(whole, rng, 4, cells);
    std::sort(cells.begin(), cells.end());  // stored order: by offset
    for (const Box& cell : cells) {
      const uint64_t n = cell.volume() * DTypeSize(meta.dtype);
      meta.chunks.push_back({Box{cell.origin, cell.shape}, 0, n, 0});
      c.max_chunk = std::max(c.max_chunk, n);
    }
    total += whole.volume() * DTypeSize(meta.dtype);
    // Targets: a random partition; each cell on a random set of ranks (whole
    // replicas make broadcasts and trees).
    cells.clear();
    RandomPartition(whole, rng, rng() % 3 ? 3 : 0, cells);
    for (const Box& cell : cells) {
      for (int r = 0; r < c.world; ++r) {
        // Host targets of the stored dtype covering the tensor (on rank 0 at
        // least): what scattered reads need.
        if (host_only ? r > 0 && rng() % 2 : rng() % 3 == 0) continue;
        const int kind = host_only ? 0 : static_cast<int>(rng() % 3);
        const DType dtype =
            host_only || rng() % 3 ? meta.dtype : kTypes[rng() % 4];
        c.targets[r].push_back({key, cell});
        c.own[r].push_back({cell, dtype, kind == 0});
        c.placements[r].push_back({dtype, kind == 1});
      }
    }
    c.tensors[key] = std::move(meta);
  }
  c.own_bytes = 1 + rng() % 64;
  c.min_run = 1 + rng() % 8;
  c.window = 1 + rng() % std::max<uint64_t>(1, total / (1 + rng() % 6));
  auto plan = BuildLoadPlan(c.tensors, c.targets);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (plan.ok()) c.plan = std::move(*plan);
  return c;
}

ExchangePlan PlanFor(const Case& c, int rank, const LoadPlan& plan) {
  const auto tensor_of_read = TensorsOfReads(plan, c.tensors);
  ExchangeInputs in;
  in.rank = rank;
  in.world = c.world;
  in.plan = &plan;
  in.tensor_of_read = &tensor_of_read;
  in.targets = &c.own[rank];
  in.placements = [&c](int r, size_t t) { return c.placements[r][t]; };
  in.device_transport = c.transport;
  in.window_bytes = c.window;
  in.own_message_bytes = c.own_bytes;
  in.min_scatter_run_bytes = c.min_run;
  return BuildExchangePlan(in);
}

// The plan printed with reads and items named by what they are (key, chunk,
// dest rank, target) instead of indices: equal for the global and the
// per-rank plan.
std::string Canonical(const ExchangePlan& x, const LoadPlan& plan) {
  auto read = [&](size_t r) {
    return std::string(plan.reads[r].flat_key) + "#" +
           std::to_string(plan.reads[r].chunk);
  };
  auto item = [&](size_t i) {
    const ReadItem& it = plan.items[i];
    return read(it.read) + ">" + std::to_string(it.dest_rank) + "." +
           std::to_string(it.target);
  };
  std::ostringstream out;
  out << "host " << x.host_bytes_sent << " device " << x.device_bytes_sent;
  for (const ExchangeRound& r : x.rounds) {
    out << "\nround " << r.index << " held " << r.held_bytes << " dev "
        << r.device_out_bytes << "/" << r.device_in_bytes << " steps "
        << r.device_steps;
    for (const ExchangeRead& rd : r.reads) {
      out << "\n read " << read(rd.read) << " whole "
          << rd.whole_into_target.value_or(~0ull);
      for (const ReadCopy& c : rd.copies) {
        out << " [" << item(c.item) << " " << static_cast<int>(c.to) << " "
            << c.index << " " << c.offset << "]";
      }
    }
    for (const auto* list : {&r.sends, &r.recvs}) {
      for (const ExchangeMessage& m : *list) {
        out << "\n msg " << m.peer << " " << m.nbytes << " " << m.packed << " "
            << m.in_place.value_or(~0ull);
        for (const ExchangeSlice& s : m.slices)
          out << " [" << item(s.item) << " " << s.offset << " " << s.nbytes
              << "]";
      }
      out << "\n --";
    }
    for (const ExchangeDeviceBox& b : r.boxes) {
      out << "\n box " << read(b.read) << " " << static_cast<int>(b.dtype)
          << " " << b.nbytes << " bc " << b.broadcast << " role "
          << static_cast<int>(b.role) << " @" << b.offset << " " << item(b.item)
          << " to";
      for (int to : b.receivers) out << " " << to;
      for (const DeviceHop& h : b.hops)
        out << " (" << h.step << " " << h.from << ">" << h.to << ")";
    }
  }
  return out.str();
}

class ExchangePlanPropertyTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    std::mt19937 rng(static_cast<unsigned>(GetParam()));
    c_ = RandomCase(rng);
    for (int r = 0; r < c_.world; ++r)
      plans_.push_back(PlanFor(c_, r, c_.plan));
  }

  const ReadItem& Item(size_t i) const { return c_.plan.items[i]; }

  // Checks the messages of `rank`'s `round` (slices tile each message, each
  // slice goes between its reader and its destination) and counts each
  // item's sends and receives; returns the bytes sent.
  uint64_t CheckMessages(int rank, const ExchangeRound& round,
                         std::vector<int>& sent,
                         std::vector<int>& received) const {
    uint64_t sent_bytes = 0;
    for (const auto* list : {&round.sends, &round.recvs}) {
      for (const ExchangeMessage& m : *list) {
        uint64_t at = 0;
        for (const ExchangeSlice& s : m.slices) {
          EXPECT_EQ(s.offset, at);
          const ReadItem& item = Item(s.item);
          EXPECT_EQ(s.nbytes,
                    item.num_elements() * DTypeSize(Tensor(item.read).dtype));
          EXPECT_EQ(Round(item.read), round.index);
          EXPECT_EQ(m.packed, s.nbytes < c_.own_bytes);
          at += s.nbytes;
          if (list == &round.sends) {
            EXPECT_EQ(Read(item.read).reader_rank, rank);
            EXPECT_EQ(item.dest_rank, m.peer);
            ++sent[s.item];
          } else {
            EXPECT_EQ(Read(item.read).reader_rank, m.peer);
            EXPECT_EQ(item.dest_rank, rank);
            ++received[s.item];
          }
        }
        EXPECT_EQ(at, m.nbytes);
        if (list == &round.sends) sent_bytes += m.nbytes;
      }
    }
    return sent_bytes;
  }

  // Checks where the reads of `rank`'s `round` copy their items, counting the
  // copies into the rank's own targets.
  void CheckReadCopies(int rank, const ExchangeRound& round,
                       std::vector<int>& copied) const {
    for (const ExchangeRead& read : round.reads) {
      if (read.whole_into_target) {
        ASSERT_EQ(read.copies.size(), 1u);
        EXPECT_EQ(read.copies[0].to, ReadCopy::To::kTarget);
      }
      for (const ReadCopy& copy : read.copies) {
        const ReadItem& item = Item(copy.item);
        EXPECT_EQ(item.read, read.read);
        if (copy.to == ReadCopy::To::kTarget) {
          EXPECT_EQ(item.dest_rank, rank);
          ++copied[copy.item];
        } else if (copy.to == ReadCopy::To::kMessage) {
          const ExchangeMessage& m = round.sends.at(copy.index);
          EXPECT_TRUE(std::any_of(
              m.slices.begin(), m.slices.end(), [&](const ExchangeSlice& s) {
                return s.item == copy.item && s.offset == copy.offset;
              }));
        } else {
          EXPECT_EQ(round.boxes.at(copy.index).item, copy.item);
        }
      }
    }
  }

  // Where one byte of a chunk goes.
  struct Place {
    ReadCopy::To to;
    size_t index;
    uint64_t byte;
    friend bool operator==(const Place&, const Place&) = default;
  };

  // Brute force: each byte's place, in chunk order, when every byte of the
  // chunk read goes to exactly one host place of the stored dtype (a target
  // of `rank`, a staged send); nullopt otherwise.
  // Adds to *unjoined the runs of each copy on its own.
  std::optional<std::vector<Place>> BrutePlaces(int rank,
                                                const ExchangeRound& round,
                                                const ExchangeRead& read,
                                                uint64_t* unjoined) const {
    const TensorMetadata& t = Tensor(read.read);
    const ChunkMetadata& chunk = t.chunks[Read(read.read).chunk];
    const size_t elem = DTypeSize(t.dtype);
    std::vector<std::optional<Place>> at(chunk.nbytes);
    std::vector<int> hits(chunk.nbytes, 0);
    for (const ReadCopy& copy : read.copies) {
      const ReadItem& item = Item(copy.item);
      if (copy.to == ReadCopy::To::kDeviceBox) return std::nullopt;
      if (copy.to == ReadCopy::To::kMessage && round.sends[copy.index].in_place)
        return std::nullopt;
      const OwnTarget* target = nullptr;
      if (copy.to == ReadCopy::To::kTarget) {
        target = &c_.own[rank][item.target];
        if (!target->on_host || !target->dense || target->dtype != t.dtype)
          return std::nullopt;
      }
      const Box& box = item.box;
      int64_t k = 0;  // element within the item's box, row-major
      uint64_t last_src = 0, last_dst = 0;
      ForEachElement(box, [&](const Shape& x) {
        const uint64_t src = Linear(chunk.box.shape, x) * elem;
        uint64_t dst = copy.offset + k++ * elem;
        if (target != nullptr) {
          Shape y(x.size());
          for (size_t d = 0; d < x.size(); ++d)
            y[d] = x[d] - item.box.origin[d] + item.dest_origin[d];
          dst = Linear(target->box.shape, y) * elem;
        }
        const size_t index = target ? item.target : copy.index;
        *unjoined += k == 1 || src != last_src + elem || dst != last_dst + elem;
        last_src = src;
        last_dst = dst;
        for (size_t b = 0; b < elem; ++b) {
          at[src + b] = Place{copy.to, index, dst + b};
          ++hits[src + b];
        }
      });
    }
    std::vector<Place> places;
    for (size_t b = 0; b < at.size(); ++b) {
      if (hits[b] != 1) return std::nullopt;
      places.push_back(*at[b]);
    }
    return places;
  }

  // Runs of consecutive bytes of the chunk going to consecutive bytes of one
  // place: the fewest a scattered read can have.
  static uint64_t CountRuns(const std::vector<Place>& places) {
    uint64_t runs = 0;
    for (size_t b = 0; b < places.size(); ++b) {
      const bool continues = b > 0 && places[b].to == places[b - 1].to &&
                             places[b].index == places[b - 1].index &&
                             places[b].byte == places[b - 1].byte + 1;
      runs += !continues;
    }
    return runs;
  }

  const ChunkRead& Read(size_t r) const { return c_.plan.reads[r]; }
  const TensorMetadata& Tensor(size_t r) const {
    return c_.tensors.at(std::string(Read(r).flat_key));
  }
  uint64_t Round(size_t r) const { return Read(r).position / c_.window; }
  bool Device(const ReadItem& item) const {
    return c_.transport && item.dest_rank != Read(item.read).reader_rank &&
           c_.placements[item.dest_rank][item.target].on_device;
  }

  Case c_;
  std::vector<ExchangePlan> plans_;
};

// Positions follow the canonical byte order of the checkpoint.
TEST_P(ExchangePlanPropertyTest, PositionsAreCanonical) {
  std::map<std::string, uint64_t> base;
  uint64_t at = 0;
  for (const auto& [key, t] : c_.tensors) {
    base[key] = at;
    at += NumElements(t.global_shape) * DTypeSize(t.dtype);
  }
  for (const ChunkRead& r : c_.plan.reads) {
    uint64_t want = base[std::string(r.flat_key)];
    for (size_t k = 0; k < r.chunk; ++k)
      want += c_.tensors.at(std::string(r.flat_key)).chunks[k].nbytes;
    EXPECT_EQ(r.position, want) << r.flat_key << " chunk " << r.chunk;
  }
}

// Rounds: each read in its position's round, a rank in exactly the rounds
// where it reads, sends or receives, held bytes within window + one chunk.
TEST_P(ExchangePlanPropertyTest, RoundsFollowPositionsWithinBudget) {
  for (int rank = 0; rank < c_.world; ++rank) {
    std::map<uint64_t, uint64_t> held;  // brute force, by round
    std::set<uint64_t> want;
    std::map<uint64_t, std::vector<size_t>> reads;
    for (size_t r = 0; r < c_.plan.reads.size(); ++r) {
      bool mine = Read(r).reader_rank == rank, remote = false;
      for (const ReadItem& item : c_.plan.items) {
        if (item.read != r) continue;
        remote |= item.dest_rank != Read(r).reader_rank;
        if (item.dest_rank != rank || mine) continue;
        want.insert(Round(r));
        if (Device(item)) continue;
        const uint64_t bytes = item.num_elements() * DTypeSize(Tensor(r).dtype);
        const OwnTarget& t = c_.own[rank][item.target];
        const bool in_place = bytes >= c_.own_bytes && t.on_host &&
                              t.dtype == Tensor(r).dtype &&
                              BruteRun(t.box.shape, item.dest_origin,
                                       item.box.shape, DTypeSize(t.dtype));
        if (!in_place) held[Round(r)] += bytes;
      }
      if (!mine) continue;
      want.insert(Round(r));
      reads[Round(r)].push_back(r);
      if (remote) held[Round(r)] += Read(r).nbytes;
    }
    std::set<uint64_t> got;
    for (const ExchangeRound& round : plans_[rank].rounds) {
      EXPECT_TRUE(got.empty() || round.index > *got.rbegin());
      got.insert(round.index);
      std::vector<size_t> listed;
      for (const ExchangeRead& r : round.reads) listed.push_back(r.read);
      EXPECT_EQ(listed, reads[round.index]) << "rank " << rank;
      EXPECT_EQ(round.held_bytes, held[round.index]) << "rank " << rank;
      EXPECT_LE(round.held_bytes, c_.window + c_.max_chunk);
    }
    EXPECT_EQ(got, want) << "rank " << rank;
  }
}

// For every ordered pair of ranks and every round, the sender's messages to
// the receiver equal the receiver's from the sender: count, sizes, packing,
// slices and their order.
TEST_P(ExchangePlanPropertyTest, SendersAndReceiversListTheSameMessages) {
  // (round, from, to) -> messages, as the sender and as the receiver list them.
  using Key = std::tuple<uint64_t, int, int>;
  std::map<Key, std::vector<std::string>> sent, received;
  auto print = [](const ExchangeMessage& m) {
    std::ostringstream out;
    out << m.nbytes << (m.packed ? "p" : "o");
    for (const ExchangeSlice& s : m.slices)
      out << " " << s.item << "@" << s.offset << "+" << s.nbytes;
    return out.str();
  };
  for (int rank = 0; rank < c_.world; ++rank) {
    for (const ExchangeRound& round : plans_[rank].rounds) {
      std::set<int> peers_done;
      int last_peer = -1;
      for (const ExchangeMessage& m : round.sends) {
        EXPECT_NE(m.peer, rank);
        EXPECT_GE(m.peer, last_peer);  // grouped by peer
        last_peer = m.peer;
        sent[{round.index, rank, m.peer}].push_back(print(m));
      }
      for (const ExchangeMessage& m : round.recvs)
        received[{round.index, m.peer, rank}].push_back(print(m));
      EXPECT_TRUE(round.sends.size() + round.recvs.size() + round.reads.size() +
                      round.boxes.size() >
                  0)
          << "empty round " << round.index << " on rank " << rank;
    }
  }
  EXPECT_EQ(sent, received);
}

// Every item crossing ranks on the host is in exactly one message of its
// reader and one of its receiver, at a byte the slices of the message tile
// without gaps; every local item is copied once by its reader; every device
// item reaches its rank once. Together every target element is written once.
TEST_P(ExchangePlanPropertyTest, EveryByteDeliveredOnceToItsPlace) {
  std::vector<int> copied(c_.plan.items.size(), 0), sent(c_.plan.items.size()),
      received(c_.plan.items.size(), 0);
  uint64_t host_bytes = 0;
  for (int rank = 0; rank < c_.world; ++rank) {
    uint64_t sent_bytes = 0;
    for (const ExchangeRound& round : plans_[rank].rounds) {
      sent_bytes += CheckMessages(rank, round, sent, received);
      CheckReadCopies(rank, round, copied);
      for (const ExchangeDeviceBox& box : round.boxes) {
        if (box.role == ExchangeDeviceBox::Role::kInPlace ||
            box.role == ExchangeDeviceBox::Role::kStaged) {
          EXPECT_EQ(Item(box.item).dest_rank, rank);
          ++received[box.item];
        }
      }
    }
    EXPECT_EQ(plans_[rank].host_bytes_sent, sent_bytes);
    host_bytes += sent_bytes;
  }
  uint64_t want_host = 0;
  std::vector<std::vector<std::vector<int>>> count(c_.world);
  for (int r = 0; r < c_.world; ++r) {
    for (const OwnTarget& t : c_.own[r])
      count[r].emplace_back(static_cast<size_t>(t.box.volume()), 0);
  }
  for (size_t i = 0; i < c_.plan.items.size(); ++i) {
    const ReadItem& item = Item(i);
    const bool local = item.dest_rank == Read(item.read).reader_rank;
    const int deliveries = local ? copied[i] : received[i];
    EXPECT_EQ(deliveries, 1) << "item " << i;
    EXPECT_EQ(local ? 0 : received[i], local ? 0 : 1);
    if (!local && !Device(item)) {
      EXPECT_EQ(sent[i], 1) << "item " << i;
      want_host += item.num_elements() * DTypeSize(Tensor(item.read).dtype);
    }
    if (deliveries != 1) continue;
    const Box& target = c_.targets[item.dest_rank][item.target].box;
    ForEachElement(Box{item.dest_origin, item.box.shape}, [&](const Shape& x) {
      ++count[item.dest_rank][item.target][Linear(target.shape, x)];
    });
  }
  EXPECT_EQ(host_bytes, want_host);
  for (const auto& rank : count) {
    for (const auto& target : rank) {
      for (int n : target) EXPECT_EQ(n, 1);
    }
  }
}

// In place exactly where brute force finds the slice as one run: large
// incoming slices into host targets of the stored dtype, large outgoing slices
// sent from their chunk, whole chunks read into their target, device boxes
// received into their target.
TEST_P(ExchangePlanPropertyTest, InPlaceExactlyWhereOneRun) {
  for (int rank = 0; rank < c_.world; ++rank) {
    for (const ExchangeRound& round : plans_[rank].rounds) {
      for (const ExchangeMessage& m : round.recvs) {
        const ReadItem& item = Item(m.slices[0].item);
        const OwnTarget& t = c_.own[rank][item.target];
        const DType stored = Tensor(item.read).dtype;
        std::optional<uint64_t> want;
        if (!m.packed && t.on_host && t.dtype == stored) {
          want = BruteRun(t.box.shape, item.dest_origin, item.box.shape,
                          DTypeSize(stored));
        }
        EXPECT_EQ(m.in_place, want);
      }
      for (const ExchangeMessage& m : round.sends) {
        const ReadItem& item = Item(m.slices[0].item);
        const auto& chunk = Tensor(item.read).chunks[Read(item.read).chunk];
        std::optional<uint64_t> want;
        if (!m.packed) {
          want = BruteRun(chunk.box.shape, item.box.origin, item.box.shape,
                          DTypeSize(Tensor(item.read).dtype));
        }
        EXPECT_EQ(m.in_place, want);
      }
      for (const ExchangeRead& read : round.reads) {
        std::vector<size_t> items;
        for (size_t i = 0; i < c_.plan.items.size(); ++i)
          if (Item(i).read == read.read) items.push_back(i);
        const DType stored = Tensor(read.read).dtype;
        std::optional<uint64_t> want;
        if (items.size() == 1 && Item(items[0]).dest_rank == rank) {
          const ReadItem& item = Item(items[0]);
          const OwnTarget& t = c_.own[rank][item.target];
          if (t.on_host && t.dtype == stored &&
              item.box.shape ==
                  Tensor(read.read).chunks[Read(read.read).chunk].box.shape) {
            want = BruteRun(t.box.shape, item.dest_origin, item.box.shape,
                            DTypeSize(stored));
          }
        }
        EXPECT_EQ(read.whole_into_target, want);
      }
      for (const ExchangeDeviceBox& box : round.boxes) {
        if (box.role == ExchangeDeviceBox::Role::kReader) continue;
        const ReadItem& item = Item(box.item);
        const OwnTarget& t = c_.own[rank][item.target];
        const std::optional<uint64_t> run =
            BruteRun(t.box.shape, item.dest_origin, item.box.shape,
                     DTypeSize(box.dtype));
        EXPECT_EQ(box.role == ExchangeDeviceBox::Role::kInPlace,
                  run.has_value());
        if (run) {
          EXPECT_EQ(box.offset, *run);
        }
      }
    }
  }
}

// Device boxes: the receivers are exactly the ranks whose device targets of
// the same dtype need the box; every rank of a box lists it alike; a
// broadcast reaches every other rank, a tree reaches each receiver once from
// a rank holding the box since an earlier step, the reader sending
// ceil(log2(n + 1)) times.
TEST_P(ExchangePlanPropertyTest, DeviceRoutesAreValidTrees) {
  // (read, storage offset, lengths, dtype) -> receivers, brute force.
  using Key = std::tuple<size_t, Shape, Shape, DType>;
  std::map<Key, std::set<int>> want;
  for (const ReadItem& item : c_.plan.items) {
    if (!Device(item)) continue;
    want[{item.read, item.box.origin, item.box.shape,
          c_.placements[item.dest_rank][item.target].dtype}]
        .insert(item.dest_rank);
  }
  std::map<Key, std::vector<std::pair<int, std::string>>> seen;
  for (int rank = 0; rank < c_.world; ++rank) {
    for (const ExchangeRound& round : plans_[rank].rounds) {
      for (const ExchangeDeviceBox& box : round.boxes) {
        const ReadItem& item = Item(box.item);
        std::ostringstream route;
        route << round.index << " " << box.nbytes << " " << box.broadcast;
        for (int r : box.receivers) route << " " << r;
        for (const DeviceHop& h : box.hops)
          route << " " << h.step << ":" << h.from << ">" << h.to;
        seen[{box.read, item.box.origin, item.box.shape, box.dtype}]
            .emplace_back(rank, route.str());
      }
    }
  }
  ASSERT_EQ(seen.size(), want.size());
  for (const auto& [key, ranks] : want) {
    const auto& views = seen[key];
    const int reader = Read(std::get<0>(key)).reader_rank;
    std::set<int> viewers;
    for (const auto& [rank, route] : views) {
      viewers.insert(rank);
      EXPECT_EQ(route, views[0].second);
    }
    std::set<int> all = ranks;
    all.insert(reader);
    EXPECT_EQ(viewers, all);
    // The route, from the reader's plan.
    const ExchangeDeviceBox* box = nullptr;
    for (const ExchangeRound& round : plans_[reader].rounds) {
      for (const ExchangeDeviceBox& b : round.boxes) {
        if (b.read == std::get<0>(key) && b.dtype == std::get<3>(key) &&
            Item(b.item).box.origin == std::get<1>(key) &&
            Item(b.item).box.shape == std::get<2>(key))
          box = &b;
      }
    }
    ASSERT_NE(box, nullptr);
    EXPECT_EQ(std::set<int>(box->receivers.begin(), box->receivers.end()),
              ranks);
    EXPECT_EQ(box->receivers.size(), ranks.size());
    if (box->broadcast) {
      EXPECT_EQ(static_cast<int>(ranks.size()), c_.world - 1);
      EXPECT_GE(ranks.size(), 2u);
      EXPECT_TRUE(box->hops.empty());
      continue;
    }
    EXPECT_FALSE(ranks.size() >= 2 &&
                 static_cast<int>(ranks.size()) == c_.world - 1);
    std::map<int, int> since{{reader, -1}};
    std::set<std::pair<int, int>> busy;  // (step, sender)
    for (const DeviceHop& hop : box->hops) {
      ASSERT_TRUE(since.count(hop.from));
      EXPECT_LT(since[hop.from], hop.step);
      EXPECT_TRUE(since.emplace(hop.to, hop.step).second) << "received twice";
      EXPECT_TRUE(busy.emplace(hop.step, hop.from).second);
    }
    EXPECT_EQ(since.size(), ranks.size() + 1);
    const int n = static_cast<int>(ranks.size());
    EXPECT_EQ(
        std::count_if(box->hops.begin(), box->hops.end(),
                      [&](const DeviceHop& h) { return h.from == reader; }),
        static_cast<int>(std::ceil(std::log2(n + 1))));
  }
}

// A rank's per-rank plan gives the same exchange plan as the global plan.
TEST_P(ExchangePlanPropertyTest, PerRankPlanGivesTheSamePlan) {
  for (int rank = 0; rank < c_.world; ++rank) {
    const LoadPlan mine = RestrictToRank(c_.plan, rank, [&](int r, size_t t) {
      return c_.placements[r][t].on_device;
    });
    for (const ChunkRead& read : mine.reads) {
      bool any = read.reader_rank == rank;
      for (const ReadItem& item : c_.plan.items)
        any |= Read(item.read).flat_key == read.flat_key &&
               Read(item.read).chunk == read.chunk && item.dest_rank == rank;
      EXPECT_TRUE(any);
    }
    EXPECT_EQ(Canonical(PlanFor(c_, rank, mine), mine),
              Canonical(plans_[rank], c_.plan))
        << "rank " << rank;
  }
}

// The random cases reach every decision the plan makes.
TEST(ExchangePlanCoverageTest, RandomCasesReachEveryFeature) {
  std::map<std::string, int> seen;
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const Case c = RandomCase(rng);
    for (int rank = 0; rank < c.world; ++rank) {
      const ExchangePlan x = PlanFor(c, rank, c.plan);
      seen["several rounds"] += x.rounds.size() > 1;
      for (const ExchangeRound& round : x.rounds) {
        for (const ExchangeMessage& m : round.recvs) {
          seen[m.packed ? "packed" : "large"]++;
          seen["received in place"] += m.in_place.has_value();
          seen["staged large"] += !m.packed && !m.in_place;
        }
        for (const ExchangeMessage& m : round.sends)
          seen["sent from chunk"] += m.in_place.has_value();
        for (const ExchangeRead& r : round.reads)
          seen["whole chunk"] += r.whole_into_target.has_value();
        for (const ExchangeDeviceBox& b : round.boxes) {
          seen["broadcast"] += b.broadcast;
          seen["tree"] += b.hops.size() > 1;
          seen["device in place"] +=
              b.role == ExchangeDeviceBox::Role::kInPlace;
          seen["device staged"] += b.role == ExchangeDeviceBox::Role::kStaged;
        }
      }
    }
  }
  for (const char* feature :
       {"several rounds", "packed", "large", "received in place",
        "staged large", "sent from chunk", "whole chunk", "broadcast", "tree",
        "device in place", "device staged"}) {
    EXPECT_GE(seen[feature], 10) << feature;
  }
}

// Scattered reads, against the copies done byte by byte: every byte of the
// chunk goes to one place, the one its copy gives; a read is scattered exactly
// when that is possible with runs long enough on average.
TEST_P(ExchangePlanPropertyTest, ScatteredReadsPlaceEveryByteAsCopiesDo) {
  for (int rank = 0; rank < c_.world; ++rank) {
    for (const ExchangeRound& round : plans_[rank].rounds) {
      for (const ExchangeRead& read : round.reads) {
        uint64_t unjoined = 0;
        const std::optional<std::vector<Place>> places =
            BrutePlaces(rank, round, read, &unjoined);
        const uint64_t nbytes =
            Tensor(read.read).chunks[Read(read.read).chunk].nbytes;
        const uint64_t most = nbytes / c_.min_run;
        const bool possible = places.has_value() && !read.whole_into_target &&
                              CountRuns(*places) <= most;
        const bool worth = unjoined <= kUnjoinedRunsPerRun * most + 16;
        std::vector<Place> got;
        for (const ScatterRun& run : read.scatter) {
          for (uint64_t b = 0; b < run.nbytes; ++b)
            got.push_back({run.to(), run.index, run.offset + b});
        }
        if (!read.scatter.empty()) {
          ASSERT_TRUE(possible) << "rank " << rank << " read " << read.read;
          EXPECT_EQ(got, *places) << "rank " << rank << " read " << read.read;
          EXPECT_EQ(read.scatter.size(), CountRuns(*places));
        } else {
          EXPECT_FALSE(possible && worth)
              << "rank " << rank << " read " << read.read;
        }
      }
    }
  }
}

// The cases above meet scattered reads often enough to test them.
TEST(ExchangePlanTest, RandomCasesHaveManyScatteredReads) {
  int scattered = 0;
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const Case c = RandomCase(rng);
    for (int r = 0; r < c.world; ++r) {
      for (const ExchangeRound& round : PlanFor(c, r, c.plan).rounds) {
        for (const ExchangeRead& read : round.reads)
          scattered += !read.scatter.empty();
      }
    }
  }
  std::printf("scattered reads in the random cases: %d\n", scattered);
  EXPECT_GT(scattered, 100);
}

INSTANTIATE_TEST_SUITE_P(Random, ExchangePlanPropertyTest,
                         ::testing::Range(0, 400));

}  // namespace
}  // namespace ckptdb::planner
