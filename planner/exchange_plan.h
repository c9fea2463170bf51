#pragma once

// The exchange of a load as a value: for one rank, which chunks it reads in
// which round, the messages it sends and receives per peer, where each
// incoming slice lands, and how boxes for device targets travel. Computed from
// what both ends of every message know, so that no rank asks another.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "core/box_geometry.h"
#include "planner/load_plan.h"

namespace ckptdb::planner {

// Slices of at least this many bytes travel as messages of their own (and may
// land in place); smaller slices for one peer are packed into one message per
// round, which is received into a staging buffer and copied to its targets.
// A quarter of Options::max_chunk_bytes' default: a chunk resharded two, four
// or eight ways along its columns leaves slices just under a half, a quarter
// or an eighth of it (chunks hold whole rows), and each of those still lands
// in place rather than costing the receiver a staged copy.
inline constexpr uint64_t kOwnMessageBytes = uint64_t{64} << 10;

// The placement of any rank's target: (rank, index into that rank's targets).
using PlacementLookup = std::function<TargetPlacement(int rank, size_t target)>;

// One of the planning rank's own targets, as its memory holds it.
struct OwnTarget {
  Box box;  // origin and shape in the tensor's index space
  DType dtype = DType::kFloat32;
  bool on_host = true;
  // The target's memory is dense row-major: a box that is one run of it can
  // land in place. A strided target gets every box copied into it.
  bool dense = true;
};

// One transfer of a box for device targets: at `step`, `from` sends the box
// to `to`.
struct DeviceHop {
  int step = 0, from = 0, to = 0;
  friend bool operator==(const DeviceHop&, const DeviceHop&) = default;
};

// The hops that bring a box from `reader` to every one of `receivers`
// (distinct, none the reader): a binomial tree, in which every rank holding the
// box after a step sends it to one rank still waiting in the next, so the
// reader sends it ceil(log2(n + 1)) times for n receivers.
std::vector<DeviceHop> DeviceHops(int reader,
                                  const std::vector<int>& receivers);

// One slice of a message.
struct ExchangeSlice {
  size_t item = 0;      // index into the LoadPlan's items
  uint64_t offset = 0;  // first byte within the message
  uint64_t nbytes = 0;  // in the stored dtype
  friend bool operator==(const ExchangeSlice&, const ExchangeSlice&) = default;
};

// One message between the planning rank and `peer`: a packed batch of small
// slices, or one large slice. Bytes travel in the stored dtype.
struct ExchangeMessage {
  int peer = 0;
  uint64_t nbytes = 0;
  bool packed = false;
  std::vector<ExchangeSlice> slices;  // in item order
  // Sent: the slice is one run of its chunk, sent from the chunk buffer at
  // this byte. Received: the slice lands straight in its target at this byte
  // (a host target of the stored dtype holding it as one run).
  std::optional<uint64_t> in_place;
  friend bool operator==(const ExchangeMessage&,
                         const ExchangeMessage&) = default;
};

// What the reader does with one item of a chunk it read.
struct ReadCopy {
  enum class To { kTarget, kMessage, kDeviceBox };
  size_t item = 0;
  To to = To::kTarget;
  // kMessage: index into the round's sends; kDeviceBox: into its boxes.
  size_t index = 0;
  // kMessage: first byte within the message.
  uint64_t offset = 0;
  friend bool operator==(const ReadCopy&, const ReadCopy&) = default;
};

// Scattered reads are planned only where a chunk's runs average at least this
// many bytes: below it, reading into a buffer and copying out costs less than
// the per-run work.
inline constexpr uint64_t kMinScatterRunBytes = 1024;
// Planning gives up on a scattered read once the runs of its items, before
// neighbours are joined, pass this many per joined run allowed (plus 16).
inline constexpr uint64_t kUnjoinedRunsPerRun = 16;

// Chunks of at least this many bytes are not read scattered (a run's length
// has 31 bits).
inline constexpr uint64_t kMaxScatterChunkBytes = uint64_t{1} << 31;

// A run of a chunk read straight into the place it goes: the next `nbytes` of
// the chunk (runs follow each other through the chunk) land at byte `offset`
// of this rank's target `index` (kTarget) or of the round's staged send
// `index` (kMessage). 16 bytes: a plan can hold millions (a 4 KiB run each).
struct ScatterRun {
  uint64_t offset = 0;
  uint32_t index = 0;
  uint32_t nbytes : 31 = 0;
  // Into a staged send rather than a target.
  uint32_t into_message : 1 = 0;

  ReadCopy::To to() const {
    return into_message ? ReadCopy::To::kMessage : ReadCopy::To::kTarget;
  }
  friend bool operator==(const ScatterRun&, const ScatterRun&) = default;
};

// One chunk the planning rank reads.
struct ExchangeRead {
  size_t read = 0;  // index into the LoadPlan's reads
  // The chunk is the read's only slice, for a host target of this rank of the
  // stored dtype holding it as one run at this byte: read straight into it.
  std::optional<uint64_t> whole_into_target;
  // With whole_into_target, the one kTarget copy that the read replaces.
  std::vector<ReadCopy> copies;
  // Non-empty: every byte of the chunk goes to exactly one host place in the
  // stored dtype (targets of this rank, staged sends), in runs of
  // min_scatter_run_bytes on average: the chunk is read straight into them,
  // with no chunk buffer, and `copies` are done by the read.
  std::vector<ScatterRun> scatter{};
  friend bool operator==(const ExchangeRead&, const ExchangeRead&) = default;
};

// The slices of one read with the same box, for device targets of the same
// dtype on ranks other than the reader (with a DeviceTransport): packed and
// converted once by the reader, moved device to device.
struct ExchangeDeviceBox {
  enum class Role { kReader, kInPlace, kStaged, kNone };
  size_t read = 0;
  DType dtype = DType::kFloat32;  // of the targets: what travels
  uint64_t nbytes = 0;
  std::vector<int> receivers;  // in item order
  // Every other rank receives it: one broadcast at step 0 of the round, on
  // every rank. Otherwise `hops`.
  bool broadcast = false;
  std::vector<DeviceHop> hops;
  // The planning rank's copy: packed by it (kReader) at `offset` of the
  // round's outgoing device buffer, received straight into its target at byte
  // `offset` (kInPlace), or staged at `offset` of the incoming device buffer
  // and placed from there (kStaged).
  Role role = Role::kNone;
  uint64_t offset = 0;
  size_t item = 0;  // the planning rank's item (receivers), or the one packed
  friend bool operator==(const ExchangeDeviceBox&,
                         const ExchangeDeviceBox&) = default;
};

// One round the planning rank takes part in.
struct ExchangeRound {
  // The round's number: the reads of chunks whose position lies in
  // [index x window, (index + 1) x window).
  uint64_t index = 0;
  std::vector<ExchangeRead> reads;  // in plan order
  // Posted in this order; per peer the packed batch first, then the large
  // slices in item order, as the peer lists them.
  std::vector<ExchangeMessage> sends, recvs;
  std::vector<ExchangeDeviceBox> boxes;  // in plan order
  // Host bytes the rank holds for the round: chunks read for other ranks and
  // incoming slices staged before landing.
  uint64_t held_bytes = 0;
  uint64_t device_out_bytes = 0, device_in_bytes = 0;
  // Transport steps of the round's boxes this rank takes part in.
  int device_steps = 0;
  friend bool operator==(const ExchangeRound&, const ExchangeRound&) = default;
};

struct ExchangePlan {
  std::vector<ExchangeRound> rounds;  // by increasing index
  // Bytes this rank sends over the host communicator and device to device.
  uint64_t host_bytes_sent = 0, device_bytes_sent = 0;
  friend bool operator==(const ExchangePlan&, const ExchangePlan&) = default;
};

// What BuildExchangePlan plans from.
struct ExchangeInputs {
  int rank = 0;
  int world = 1;
  // The global plan or `rank`'s per-rank plan (RestrictToRank): both give the
  // same ExchangePlan up to item and read indices.
  const LoadPlan* plan = nullptr;
  // The stored tensor of each read of `plan` (TensorsOfReads): dtype, chunk
  // shapes.
  const std::vector<const TensorMetadata*>* tensor_of_read = nullptr;
  // `rank`'s targets, indexed like its LoadTargets.
  const std::vector<OwnTarget>* targets = nullptr;
  // Any rank's target placements.
  PlacementLookup placements;
  // Boxes for device targets of other ranks move device to device (a
  // DeviceTransport on every rank); through host messages otherwise.
  bool device_transport = false;
  // Bytes of canonical positions per round (Options::load_buffer_bytes, the
  // same on every rank). REQUIRES: > 0.
  uint64_t window_bytes = 1;
  // Slices of at least this many bytes travel as messages of their own.
  uint64_t own_message_bytes = kOwnMessageBytes;
  // Chunks are read straight into their places only where their runs average
  // at least this many bytes. REQUIRES: > 0.
  uint64_t min_scatter_run_bytes = kMinScatterRunBytes;
};

// Plans `rank`'s part of the exchange. A rank takes part only in rounds where
// it reads, sends or receives; it walks them by increasing index, and every
// peer lists the same messages for the same round, so the walk needs no
// collective. Host bytes held per round stay within window_bytes plus one
// chunk. Pure and deterministic.
ExchangePlan BuildExchangePlan(const ExchangeInputs& in);

}  // namespace ckptdb::planner
