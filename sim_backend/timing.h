// Modelled cost of single instructions, from the parameter table only.
#pragma once

#include <cstdint>

#include "spyre/runtime/program.h"
#include "spyre/sim/timing_table.h"

namespace spyre::sim {

uint64_t matmul_cycles(const rt::MatMul& mm, const rt::CostTable& table);
uint64_t vector_cycles(const rt::Vector& v, const rt::CostTable& table);
uint64_t reduce_cycles(const rt::Reduce& r, const rt::CostTable& table);
uint64_t rand_cycles(const rt::RandFill& r, const rt::CostTable& table);

// Cycles a DMA engine spends streaming `bytes` in `runs` contiguous runs
// (latency and device-memory contention are added by the scheduler).
uint64_t dma_stream_cycles(uint64_t bytes, uint64_t runs,
                           const rt::CostTable& table);

// Host link and on-device copy times, in ns.
double host_copy_ns(uint64_t bytes, const rt::CostTable& table);
double device_copy_ns(uint64_t bytes_read, uint64_t bytes_written,
                      const rt::CostTable& table);

// Device-memory bytes the shared DRAM server moves per cycle.
double dram_bytes_per_cycle(const rt::CostTable& table);

// Ring hops between two cores on the bidirectional ring (shorter way).
uint32_t ring_hops(uint32_t from, uint32_t to, uint32_t num_cores);

class SimExecutable;
// The static dataflow schedule (timing depends only on the program): fills
// every instruction's start/end, the executable's stats, and its deadlock
// message when the ring channels can never all complete.
void schedule(SimExecutable& exe, const rt::CostTable& table,
              uint32_t num_cores);

}  // namespace spyre::sim
