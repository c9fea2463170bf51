// The NCCL device transport: one communicator per DB over the ranks' GPUs,
// bootstrapped through the DB's host Communicator (MPI), point-to-point steps
// posted as NCCL groups, broadcasts on the same stream.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "engine/device/cuda_status.h"
#include "engine/device/device_transport.h"

namespace ckptdb::engine {
namespace {

Status FromNccl(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return Status::OK();
  std::string message =
      std::string("NCCL ") + what + ": " + ncclGetErrorString(r);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0')
      message.append(" (").append(last).append(")");
  }
  return Status::IOError(std::move(message));
}

class NcclTransport : public DeviceTransport {
 public:
  NcclTransport(Device device, ncclComm_t comm, cudaStream_t stream)
      : device_(device), comm_(comm), stream_(stream) {}
  ~NcclTransport() override {
    cudaSetDevice(device_.index);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  const Device& device() const override { return device_; }

  Status Run(std::span<const SendBuffer> sends,
             std::span<const RecvBuffer> recvs,
             std::span<const DeviceBroadcast> broadcasts) override {
    CKPTDB_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_.index), "selecting device"));
    Status posted;
    if (!sends.empty() || !recvs.empty()) {
      posted = FromNccl(ncclGroupStart(), comm_, "group start");
      for (const SendBuffer& s : sends) {
        if (!posted.ok()) break;
        posted = FromNccl(
            ncclSend(s.data, s.nbytes, ncclUint8, s.peer, comm_, stream_),
            comm_, "send");
      }
      for (const RecvBuffer& r : recvs) {
        if (!posted.ok()) break;
        posted = FromNccl(
            ncclRecv(r.data, r.nbytes, ncclUint8, r.peer, comm_, stream_),
            comm_, "receive");
      }
      // The group is closed even after an error, so that NCCL's state stays
      // consistent.
      const Status ended = FromNccl(ncclGroupEnd(), comm_, "group end");
      if (posted.ok()) posted = ended;
    }
    for (const DeviceBroadcast& b : broadcasts) {
      if (!posted.ok()) break;
      posted = FromNccl(ncclBroadcast(b.data, b.data, b.nbytes, ncclUint8,
                                      b.root, comm_, stream_),
                        comm_, "broadcast");
    }
    const Status done =
        FromCuda(cudaStreamSynchronize(stream_), "waiting for NCCL transfers");
    CKPTDB_RETURN_IF_ERROR(posted);
    return done;
  }

 private:
  const Device device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
};

// "1" + where this rank's GPU is, or "0" + why it has none.
std::string DescribeGpu(const Device& device) {
  Status s = FromCuda(cudaSetDevice(device.index), "selecting device");
  char bus[64] = {};
  if (s.ok()) {
    s = FromCuda(cudaDeviceGetPCIBusId(bus, sizeof bus, device.index),
                 "reading the PCI bus id");
  }
  if (!s.ok()) return std::string("0").append(s.ToString());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string("1").append(bus).append("@").append(host);
}

}  // namespace

Result<std::unique_ptr<DeviceTransport>> BuildDeviceTransport(
    Communicator& comm, const Device& device) {
  // Every rank learns every rank's GPU first, so that all of them give up
  // together (NCCL wants one GPU per rank) before any starts NCCL's bootstrap.
  CKPTDB_ASSIGN_OR_RETURN(std::vector<std::string> gpus,
                   comm.AllGather(DescribeGpu(device)));
  std::map<std::string, int> owner;
  for (int r = 0; r < static_cast<int>(gpus.size()); ++r) {
    if (gpus[r][0] != '1') {
      return Status::FailedPrecondition(
          "rank " + std::to_string(r) +
          " has no usable GPU: " + gpus[r].substr(1));
    }
    auto [it, fresh] = owner.emplace(gpus[r].substr(1), r);
    if (!fresh) {
      return Status::FailedPrecondition(
          "ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
          " share GPU " + it->first + " (NCCL needs one GPU per rank)");
    }
  }
  std::string id(sizeof(ncclUniqueId) + 1, '\0');
  if (comm.rank() == 0) {
    ncclUniqueId unique;
    const Status made =
        FromNccl(ncclGetUniqueId(&unique), nullptr, "unique id");
    if (made.ok()) {
      id[0] = '1';
      std::memcpy(id.data() + 1, &unique, sizeof unique);
    } else {
      id = std::string("0").append(made.ToString());
    }
  }
  CKPTDB_RETURN_IF_ERROR(comm.Broadcast(&id, 0));
  if (id[0] != '1' || id.size() != sizeof(ncclUniqueId) + 1) {
    return Status::FailedPrecondition("rank 0 could not start NCCL: " +
                                      id.substr(1));
  }
  ncclUniqueId unique;
  std::memcpy(&unique, id.data() + 1, sizeof unique);
  CKPTDB_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device.index), "selecting device"));
  ncclComm_t nccl = nullptr;
  CKPTDB_RETURN_IF_ERROR(
      FromNccl(ncclCommInitRank(&nccl, comm.size(), unique, comm.rank()),
               nullptr, "communicator setup"));
  cudaStream_t stream = nullptr;
  const Status streamed = FromCuda(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  if (!streamed.ok()) {
    ncclCommDestroy(nccl);
    return streamed;
  }
  return std::unique_ptr<DeviceTransport>(
      new NcclTransport(device, nccl, stream));
}

}  // namespace ckptdb::engine
