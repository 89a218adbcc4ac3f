#include "distributed/staged_work.h"

#include <c10/util/Exception.h>

#include <utility>

namespace spyre::torch_glue::distributed {

void wait_for_transport(c10d::Work& work, const char* op, int rank,
                        std::chrono::milliseconds timeout) {
  std::string cause;
  try {
    work.wait(timeout);
    return;
  } catch (const c10::Error& error) {
    cause = error.what_without_backtrace();
  } catch (const std::exception& error) {
    cause = error.what();
  }
  C10_THROW_ERROR(
      DistBackendError,
      c10::str("spyreccl ", op, " on rank ", rank,
               ": the host transport (gloo) failed: ", cause,
               "; a peer rank may have exited, or not joined this collective "
               "within the process group's timeout"));
}

// ---- StagedWork -----------------------------------------------------------

StagedWork::StagedWork(c10::intrusive_ptr<c10d::Work> transport,
                       std::function<void()> finish,
                       std::vector<at::Tensor> outputs, int rank,
                       c10d::OpType type)
    : c10d::Work(rank, type),
      transport_(std::move(transport)),
      finish_(std::move(finish)),
      outputs_(std::move(outputs)) {}

void StagedWork::finish_once() {
  std::lock_guard<std::mutex> lock(finish_mutex_);
  if (finished_) return;
  if (finish_) finish_();
  finished_ = true;
  finish_ = nullptr;  // drops the staging buffers it holds
}

bool StagedWork::wait(std::chrono::milliseconds timeout) {
  wait_for_transport(*transport_, c10d::opTypeToString(opType_).c_str(), rank_,
                     timeout);
  finish_once();
  return true;
}

bool StagedWork::isCompleted() {
  if (!transport_->isCompleted()) return false;
  if (transport_->isSuccess()) finish_once();
  return true;
}

bool StagedWork::isSuccess() const { return transport_->isSuccess(); }

std::exception_ptr StagedWork::exception() const {
  return transport_->exception();
}

int StagedWork::sourceRank() const { return transport_->sourceRank(); }

std::vector<at::Tensor> StagedWork::result() { return outputs_; }

void StagedWork::synchronize() { wait(kNoTimeout); }

}  // namespace spyre::torch_glue::distributed
