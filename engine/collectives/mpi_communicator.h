#pragma once

#include <cstddef>

#include "ckptdb/mpi.h"

namespace ckptdb::engine {

// MpiCommunicator with every MPI call moving at most `max_message` bytes
// (MpiCommunicator uses 1 GiB, below MPI's int counts). Tests pass small
// values to exercise the splitting.
Result<std::shared_ptr<Communicator>> NewMpiCommunicator(MPI_Comm comm,
                                                         size_t max_message);

}  // namespace ckptdb::engine
