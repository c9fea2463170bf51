#include "engine/src/load_executor.h"

#include <map>

#include "engine/src/box_copy.h"
#include "engine/src/parallel.h"
#include "engine/src/wire.h"

namespace ckptdb::engine {

Status ExecuteLoad(const LoadExecution& x, LoadStats* stats) {
  const planner::LoadPlan& plan = x.plan;
  const int rank = x.comm.rank();

  // Items of read i are plan.items[first_item[i], first_item[i + 1]).
  std::vector<size_t> first_item(plan.reads.size() + 1, plan.items.size());
  for (size_t i = plan.items.size(); i-- > 0;)
    first_item[plan.items[i].read] = i;
  for (size_t r = plan.reads.size(); r-- > 0;) {
    first_item[r] = std::min(first_item[r], first_item[r + 1]);
  }
  auto dtype_of = [&](size_t read) {
    return x.meta.tensors.at(plan.reads[read].flat_key).dtype;
  };

  // Slices that cross ranks travel packed contiguously, in the stored dtype.
  std::map<size_t, std::vector<char>> outgoing, incoming;  // by item index
  std::vector<size_t> my_reads;
  for (size_t i = 0; i < plan.reads.size(); ++i) {
    if (plan.reads[i].reader_rank == rank) my_reads.push_back(i);
  }
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const planner::ReadItem& item = plan.items[i];
    const int reader = plan.reads[item.read].reader_rank;
    const size_t bytes = item.num_elements() * DTypeSize(dtype_of(item.read));
    if (item.dest_rank == rank) stats->bytes_needed += bytes;
    if (reader == rank && item.dest_rank != rank) {
      outgoing[i].resize(bytes);
      stats->bytes_sent += bytes;
    }
    if (reader != rank && item.dest_rank == rank) incoming[i].resize(bytes);
  }

  Status executed =
      ParallelFor(my_reads.size(), x.io_threads, [&](size_t k) -> Status {
        const planner::ChunkRead& read = plan.reads[my_reads[k]];
        const TensorMetadata& tensor = x.meta.tensors.at(read.flat_key);
        const ChunkMetadata& chunk = tensor.chunks[read.chunk];
        ASSIGN_OR_RETURN(
            storage::ChunkBuffer buffer,
            x.store.ReadChunk(x.meta.info.id, read.flat_key, chunk));
        for (size_t i = first_item[my_reads[k]];
             i < first_item[my_reads[k] + 1]; ++i) {
          const planner::ReadItem& item = plan.items[i];
          const StridedBox src{buffer.bytes().data(), chunk.local_shape,
                               item.storage_offset};
          if (item.dest_rank == rank) {
            TensorView& view = *x.targets[item.target];
            CopyBox(src, tensor.dtype,
                    {view.data, view.local_shape, item.dest_offset}, view.dtype,
                    item.lengths);
          } else {
            const Shape zero(item.lengths.size(), 0);
            CopyBox(src, tensor.dtype,
                    {outgoing.at(i).data(), item.lengths, zero}, tensor.dtype,
                    item.lengths);
          }
        }
        return Status::OK();
      });
  for (size_t read : my_reads) stats->bytes_read += plan.reads[read].nbytes;
  stats->chunks_read = my_reads.size();
  if (x.comm.size() == 1) return executed;

  // Agree before exchanging, so that no rank waits for slices a failed reader
  // never sends. The exchange matches slices in item order per pair of ranks.
  RETURN_IF_ERROR(AgreeOnStatus(x.comm, executed));
  std::vector<SendBuffer> sends;
  std::vector<RecvBuffer> recvs;
  for (auto& [i, buf] : outgoing)
    sends.push_back({plan.items[i].dest_rank, buf.data(), buf.size()});
  for (auto& [i, buf] : incoming) {
    recvs.push_back(
        {plan.reads[plan.items[i].read].reader_rank, buf.data(), buf.size()});
  }
  RETURN_IF_ERROR(AgreeOnStatus(x.comm, x.comm.Exchange(sends, recvs)));
  for (auto& [i, buf] : incoming) {
    const planner::ReadItem& item = plan.items[i];
    TensorView& view = *x.targets[item.target];
    const Shape zero(item.lengths.size(), 0);
    CopyBox({buf.data(), item.lengths, zero}, dtype_of(item.read),
            {view.data, view.local_shape, item.dest_offset}, view.dtype,
            item.lengths);
  }
  return Status::OK();
}

}  // namespace ckptdb::engine
