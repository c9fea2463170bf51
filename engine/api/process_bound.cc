#include "engine/api/process_bound.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace ckptdb::engine {
namespace {

// Deliberately never freed: its destructor would wait for threads of the
// parent process that the forked child does not have.
template <typename T>
void Abandon(T object) {
  new T(std::move(object));
}

// A save started by the owning process.
class ProcessBoundSave : public PendingSave {
 public:
  ProcessBoundSave(std::shared_ptr<PendingSave> save, std::string path)
      : save_(std::move(save)), path_(std::move(path)) {}
  ~ProcessBoundSave() override {
    if (owner_.forked()) Abandon(std::move(save_));
  }

  // Reads a flag only: safe in a child too (the parent's value at the fork).
  bool Done() const override { return save_->Done(); }
  Result<CheckpointInfo> Wait() override {
    CKPTDB_RETURN_IF_ERROR(
        owner_.Check("the pending save of store '" + path_ + "'"));
    return save_->Wait();
  }

 private:
  const OwningProcess owner_;
  std::shared_ptr<PendingSave> save_;
  const std::string path_;
};

class ProcessBoundDB : public DB {
 public:
  ProcessBoundDB(std::unique_ptr<DB> db, std::string path)
      : db_(std::move(db)), path_(std::move(path)) {}
  ~ProcessBoundDB() override {
    if (owner_.forked()) Abandon(std::move(db_));
  }

  Result<CheckpointInfo> Save(const StateDict& state,
                              const SaveOptions& options) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->Save(state, options);
  }
  Result<std::shared_ptr<PendingSave>> SaveAsync(
      const StateDict& state, const SaveOptions& options) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    CKPTDB_ASSIGN_OR_RETURN(std::shared_ptr<PendingSave> save,
                            db_->SaveAsync(state, options));
    return std::shared_ptr<PendingSave>(
        std::make_shared<ProcessBoundSave>(std::move(save), path_));
  }
  Result<LoadResult> Load(StateDict& state, const CheckpointSelector& which,
                          const LoadOptions& options) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->Load(state, which, options);
  }
  Result<std::vector<CheckpointInfo>> ListCheckpoints() override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->ListCheckpoints();
  }
  Result<CheckpointMetadata> GetMetadata(
      const CheckpointSelector& which) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->GetMetadata(which);
  }
  using DB::Read;
  Result<Tensor> Read(const std::string& flat_key,
                      const CheckpointSelector& which, const TensorIndex& index,
                      ReadStats* stats) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->Read(flat_key, which, index, stats);
  }
  Status Delete(const CheckpointSelector& which) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->Delete(which);
  }
  using DB::Verify;
  Result<VerifyReport> Verify(const CheckpointSelector& which,
                              const VerifyOptions& options) override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->Verify(which, options);
  }
  Result<StoreCheckReport> CheckStore() override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->CheckStore();
  }
  Status Close() override {
    CKPTDB_RETURN_IF_ERROR(Check());
    return db_->Close();
  }
  const Communicator& communicator() const override {
    return db_->communicator();
  }

 private:
  Status Check() const { return owner_.Check("store '" + path_ + "'"); }

  const OwningProcess owner_;
  std::unique_ptr<DB> db_;
  const std::string path_;
};

// on_exit handler of a forked child: what exit() would still do that matters
// (stdio buffers), then the end, with `status`.
void EndAtOnce(int status, void*) {
  std::fflush(nullptr);
  _exit(status);
}

// Registered last, the handler runs before every exit handler and static
// destructor inherited from the parent.
void InForkedChild() { on_exit(&EndAtOnce, nullptr); }

}  // namespace

OwningProcess::OwningProcess() : pid_(getpid()) {}

bool OwningProcess::forked() const { return getpid() != pid_; }

Status OwningProcess::Check(const std::string& what) const {
  if (!forked()) return Status::OK();
  return Status::FailedPrecondition(
      what + " was opened by process " + std::to_string(pid_) +
      " and is used in process " + std::to_string(getpid()) +
      ", a child forked from it: a handle does not survive fork() (its "
      "threads and locks stay in the parent). Nothing was done; open the "
      "store again in the child, once the parent has closed it");
}

std::unique_ptr<DB> BindToProcess(std::unique_ptr<DB> db, std::string path) {
  return std::make_unique<ProcessBoundDB>(std::move(db), std::move(path));
}

void ExitForkedChildrenAtOnce() {
  static std::once_flag once;
  std::call_once(once,
                 [] { pthread_atfork(nullptr, nullptr, &InForkedChild); });
}

}  // namespace ckptdb::engine
