#pragma once

// The MPI communicator: collective calls of a DB opened with it run over a
// caller's MPI_Comm. Separate from communicator.h so that code without MPI
// never includes <mpi.h>.

// The C API is all ckptdb uses; skip the deprecated C++ bindings, which need
// their own library.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>

#include "ckptdb/communicator.h"

namespace ckptdb {

// Wraps `comm` (duplicated, so that ckptdb's messages never match the
// caller's). MPI must be initialized by the caller, who also finalizes it after
// the last DB using this communicator is closed; ckptdb never initializes or
// finalizes MPI. Collective calls are made from the calling thread only.
Result<std::shared_ptr<Communicator>> MpiCommunicator(MPI_Comm comm);

}  // namespace ckptdb
