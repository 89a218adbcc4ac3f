// The emulator's compute kernels: one function per compute instruction of
// runtime/include/spyre/runtime/program.h. Each runs the instruction
// functionally (no timing) on one core's scratchpad. Operands are checked
// against the scratchpad's size; an access outside it raises
// rt::Error(kDeviceError) naming the operand, never touches host memory.
//
// Thread safety: kernels keep only thread_local scratch state, so different
// cores may run kernels on different host threads at the same time.
// run_matmul calls OpenBLAS, which it switches to one thread per call (once
// per process, with openblas_set_num_threads(1)): the emulator already runs
// cores on its own thread pool.
#pragma once

#include <cstdint>
#include <span>

#include "spyre/runtime/program.h"

namespace spyre::sim {

void run_matmul(const rt::MatMul& inst, std::span<uint8_t> spad);
void run_vector(const rt::Vector& inst, std::span<uint8_t> spad);
void run_reduce(const rt::Reduce& inst, std::span<uint8_t> spad);
void run_rand(const rt::RandFill& inst, std::span<uint8_t> spad);

}  // namespace spyre::sim
