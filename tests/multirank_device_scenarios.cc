// Multi-rank scenarios with device tensors, through the host stand-ins of
// tests/testing/host_device.h given to each rank's DB: device shards saved
// through staging, device targets filled by the copier, slices for other ranks'
// device targets moved by the device transport (or, when it fails, over the
// communicator). Built twice like multirank_scenarios.cc.
#include <gtest/gtest.h>

#include "ckptdb/db.h"
#include "tests/testing/group.h"
#include "tests/testing/host_device.h"
#include "tests/testing/ranks.h"

namespace ckptdb {
namespace {

using testing::GlobalTensor;
using testing::HostSeams;
using testing::MaxRanks;
using testing::OpenRank;
using testing::OpenWithDevices;
using testing::OwnedShard;
using testing::Part;
using testing::RunRanks;
using testing::ShardOf;
using testing::SharedTempDir;
using testing::SumOver;
using testing::TargetOf;

// A process-wide counter summed over the ranks of `comm`.
uint64_t Total(Communicator& comm, uint64_t process_count) {
  return testing::RanksShareProcess() ? process_count
                                      : SumOver(comm, process_count);
}

TensorView OnDevice(TensorView v) {
  v.device = {DeviceType::kCUDA, 0};
  return v;
}

// Device tensors go through the device copier: saved from device shards
// through staging, loaded into strided device targets (3-D grid boxes, a cast
// on the way) next to host targets, across a 2 -> 3 reshard.
TEST(MultiRankTest, DeviceTensorsSaveAndReshardThroughTheCopier) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  testing::HostAsDevice device;
  SharedTempDir dir;
  const GlobalTensor w(DType::kBFloat16, {40, 24}, 1);
  const GlobalTensor cube(DType::kFloat32, {6, 10, 8}, 2);
  const GlobalTensor host(DType::kInt32, {30, 5}, 3);
  Options options;
  options.max_chunk_bytes = 256;  // many chunks, several per shard
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenWithDevices(dir.path(), comm, options, HostSeams(device));
    auto [b, e] = Part(40, rank, 2);
    auto [cb, ce] = Part(6, rank, 2);
    auto [hb, he] = Part(30, rank, 2);
    OwnedShard ws = ShardOf(w, {b, 0}, {e - b, 24});
    OwnedShard cs = ShardOf(cube, {cb, 0, 0}, {ce - cb, 10, 8});
    OwnedShard hs = ShardOf(host, {hb, 0}, {he - hb, 5});
    StateDict sd;
    sd.Set("w", OnDevice(ws.View(w)));
    sd.Set("cube", OnDevice(cs.View(cube)));
    sd.Set("host", hs.View(host));
    auto info = db->Save(sd, {.step = 1});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    // Every device byte was staged once (replicas none here).
    EXPECT_TRUE(comm->Barrier().ok());
    EXPECT_EQ(Total(*comm, device.to_host_bytes.load()),
              w.bytes.size() + cube.bytes.size());
  });

  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenWithDevices(dir.path(), comm, options, HostSeams(device));
    // w by columns, as float32 on the device (cast); the cube by a grid of
    // its inner dimensions on the device; the host tensor by columns.
    auto [b, e] = Part(24, rank, 3);
    auto [rb, re] = Part(10, rank, 3);
    auto [hb, he] = Part(5, rank, 3);
    const GlobalTensor w32 = w.As(DType::kFloat32);
    OwnedShard wt = TargetOf(w32, {0, b}, {40, e - b});
    OwnedShard ct = TargetOf(cube, {1, rb, 2}, {4, re - rb, 5});
    OwnedShard ht = TargetOf(host, {0, hb}, {30, he - hb});
    StateDict sd;
    sd.Set("w", OnDevice(wt.View(w32)));
    sd.Set("cube", OnDevice(ct.View(cube)));
    sd.Set("host", ht.View(host));
    auto result = db->Load(sd, CheckpointSelector::Latest(),
                           {.strict = false, .cast = true});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(wt.bytes, w32.Slice(wt.offset, wt.local));
    EXPECT_EQ(ct.bytes, cube.Slice(ct.offset, ct.local));
    EXPECT_EQ(ht.bytes, host.Slice(ht.offset, ht.local));
    EXPECT_TRUE(comm->Barrier().ok());
    EXPECT_GT(Total(*comm, device.copies_2d.load()), 0u);
    EXPECT_EQ(Total(*comm, device.to_device_bytes.load()),
              w.bytes.size() * 2 + 4 * 10 * 5 * sizeof(float));
  });
}

// Slices for other ranks' device targets travel device to device through the
// transport (a stand-in for NCCL here): converted to the target dtype by their
// reader, received in place where the target holds them as one run, staged
// and placed with device copies otherwise, broadcast when every other rank
// needs a box, forwarded along a tree when several (not all) do; host targets
// of the same load still go over the host communicator.
TEST(MultiRankTest, DeviceSlicesForOtherRanksTravelDeviceToDevice) {
  if (MaxRanks() < 5) GTEST_SKIP() << "needs 5 ranks";
  testing::HostAsDevice device;
  testing::HostTransports transports;
  SharedTempDir dir;
  const GlobalTensor w(DType::kBFloat16, {40, 24}, 1);
  const GlobalTensor v(DType::kFloat32, {1000}, 2);
  const GlobalTensor bias(DType::kFloat32, {100}, 3);
  const GlobalTensor emb(DType::kFloat32, {8, 32}, 4);
  const GlobalTensor host(DType::kInt32, {30, 5}, 5);
  Options options;
  options.max_chunk_bytes = 256;  // many chunks, several per shard
  // One round per load, whatever the machine's default I/O threads.
  options.load_buffer_bytes = size_t{1} << 20;
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenWithDevices(dir.path(), comm, options,
                              HostSeams(device, &transports));
    auto [b, e] = Part(24, rank, 2);
    auto [vb, ve] = Part(1000, rank, 2);
    auto [hb, he] = Part(30, rank, 2);
    OwnedShard ws = ShardOf(w, {0, b}, {40, e - b});
    OwnedShard vs = ShardOf(v, {vb}, {ve - vb});
    OwnedShard bs = ShardOf(bias, {0}, {100});
    OwnedShard es = ShardOf(emb, {0, 0}, {8, 32});
    OwnedShard hs = ShardOf(host, {hb, 0}, {he - hb, 5});
    StateDict sd;
    sd.Set("w", ws.View(w));
    sd.Set("v", vs.View(v));
    sd.Set("bias", bs.View(bias));
    sd.Set("emb", es.View(emb));
    sd.Set("host", hs.View(host));
    auto info = db->Save(sd, {.step = 1});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
  });

  const GlobalTensor w32 = w.As(DType::kFloat32);
  RunRanks(5, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenWithDevices(dir.path(), comm, options,
                              HostSeams(device, &transports));
    // w (saved by columns) by rows as float32 (strided: staged, cast by the
    // reader), v in five runs (in place), bias whole everywhere (broadcast),
    // emb whole on ranks 1-4 (tree), the host tensor by columns on the host.
    auto [b, e] = Part(40, rank, 5);
    auto [vb, ve] = Part(1000, rank, 5);
    auto [hb, he] = Part(5, rank, 5);
    OwnedShard wt = TargetOf(w32, {b, 0}, {e - b, 24});
    OwnedShard vt = TargetOf(v, {vb}, {ve - vb});
    OwnedShard bt = TargetOf(bias, {0}, {100});
    OwnedShard et = TargetOf(emb, {0, 0}, {8, 32});
    OwnedShard ht = TargetOf(host, {0, hb}, {30, he - hb});
    StateDict sd;
    sd.Set("w", OnDevice(wt.View(w32)));
    sd.Set("v", OnDevice(vt.View(v)));
    sd.Set("bias", OnDevice(bt.View(bias)));
    if (rank > 0) sd.Set("emb", OnDevice(et.View(emb)));
    sd.Set("host", ht.View(host));
    auto result = db->Load(sd, CheckpointSelector::Latest(),
                           {.strict = false, .cast = true});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(wt.bytes, w32.Slice(wt.offset, wt.local));
    EXPECT_EQ(vt.bytes, v.Slice(vt.offset, vt.local));
    EXPECT_EQ(bt.bytes, bias.bytes);
    if (rank > 0) {
      EXPECT_EQ(et.bytes, emb.bytes);
    }
    EXPECT_EQ(ht.bytes, host.Slice(ht.offset, ht.local));
    const LoadStats& stats = result->stats;
    EXPECT_GT(SumOver(*comm, stats.device_bytes_sent), 0u);
    // Host slices still crossed ranks over the host communicator.
    EXPECT_GT(SumOver(*comm, stats.bytes_sent - stats.device_bytes_sent), 0u);
    EXPECT_TRUE(comm->Barrier().ok());
    EXPECT_EQ(Total(*comm, transports.created.load()), 5u);
    // Every bias chunk was broadcast once, by its reader.
    EXPECT_EQ(Total(*comm, transports.broadcasts.load()), 2u);
    EXPECT_GT(Total(*comm, device.within_device_bytes.load()), 0u);

    // emb alone: four ranks need each chunk, so its reader sends it to one
    // rank, then again while that rank forwards it: two steps, and every
    // receiver gets each byte once.
    const uint64_t runs_before = Total(*comm, transports.runs.load());
    EXPECT_TRUE(comm->Barrier().ok());
    StateDict only_emb;
    if (rank > 0) only_emb.Set("emb", OnDevice(et.View(emb)));
    std::fill(et.bytes.begin(), et.bytes.end(), 0);
    auto again =
        db->Load(only_emb, CheckpointSelector::Latest(), {.strict = false});
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    if (rank > 0) {
      EXPECT_EQ(et.bytes, emb.bytes);
    }
    EXPECT_EQ(SumOver(*comm, again->stats.device_bytes_sent),
              3 * emb.bytes.size());
    EXPECT_EQ(again->stats.bytes_sent, again->stats.device_bytes_sent);
    EXPECT_TRUE(comm->Barrier().ok());
    // One round (the load buffer holds everything), two steps, run by the
    // four ranks that hold the boxes; rank 0 takes no part.
    EXPECT_EQ(Total(*comm, transports.runs.load()) - runs_before, 2u * 4);
    // The transport was made once per DB and kept for the second load.
    EXPECT_EQ(Total(*comm, transports.created.load()), 5u);
  });
}

// A rank without a transport makes every rank fall back to host transfers:
// the load succeeds, nothing travels device to device.
TEST(MultiRankTest, DeviceTransportFailureFallsBackToHostTransfers) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  testing::HostAsDevice device;
  testing::HostTransports transports(/*fail_rank=*/1);
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {30, 8}, 7);
  Options options;
  options.max_chunk_bytes = 256;
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenWithDevices(dir.path(), comm, options,
                              HostSeams(device, &transports));
    auto [b, e] = Part(30, rank, 3);
    OwnedShard s = ShardOf(w, {b, 0}, {e - b, 8});
    StateDict sd;
    sd.Set("w", OnDevice(s.View(w)));
    ASSERT_TRUE(db->Save(sd, {}).ok());
    auto [cb, ce] = Part(8, rank, 3);
    OwnedShard t = TargetOf(w, {0, cb}, {30, ce - cb});
    StateDict want;
    want.Set("w", OnDevice(t.View(w)));
    auto result = db->Load(want, CheckpointSelector::Latest(), {});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(t.bytes, w.Slice(t.offset, t.local));
    EXPECT_EQ(result->stats.device_bytes_sent, 0u);
    EXPECT_GT(SumOver(*comm, result->stats.bytes_sent), 0u);
  });
}

TEST(MultiRankTest, DeviceTensorsWithoutACopierAreRefused) {
  if (engine::BuiltDeviceCopier() != nullptr)
    GTEST_SKIP() << "this machine has a CUDA device";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {4, 4}, 1);
  RunRanks(1, [&](int, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    OwnedShard s = ShardOf(w, {0, 0}, {4, 4});
    StateDict sd;
    sd.Set("w", OnDevice(s.View(w)));
    auto info = db->Save(sd, {});
    ASSERT_FALSE(info.ok());
    EXPECT_TRUE(info.status().IsInvalidArgument());
    EXPECT_NE(info.status().message().find("'w'"), std::string::npos)
        << info.status().ToString();
    auto listed = db->ListCheckpoints();
    ASSERT_TRUE(listed.ok());
    EXPECT_TRUE(listed->empty());
  });
}

}  // namespace
}  // namespace ckptdb
