// The Work of a spyreccl collective: the transport's Work plus the step
// that finishes the collective on the device.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace spyre::torch_glue::distributed {

// Waits for a transport Work; its failure (a peer gone, a timeout) becomes
// a DistBackendError that names spyreccl, the collective and the rank.
void wait_for_transport(c10d::Work& work, const char* op, int rank,
                        std::chrono::milliseconds timeout);

// A transport Work plus the step that finishes the collective on the
// device (copying host results back, dividing an average).
class StagedWork : public c10d::Work {
 public:
  StagedWork(c10::intrusive_ptr<c10d::Work> transport,
             std::function<void()> finish, std::vector<at::Tensor> outputs,
             int rank, c10d::OpType type);

  bool wait(std::chrono::milliseconds timeout) override;
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;

 private:
  void finish_once();

  c10::intrusive_ptr<c10d::Work> transport_;
  std::function<void()> finish_;
  std::vector<at::Tensor> outputs_;
  std::mutex finish_mutex_;
  bool finished_ = false;
};

}  // namespace spyre::torch_glue::distributed
