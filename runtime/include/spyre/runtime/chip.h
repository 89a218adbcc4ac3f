// Chip facts: what the program planners (the kernel builders and the
// compiler) need to know of the device they plan for. A backend fills them
// in its DeviceProperties; planners read them from there and nowhere else,
// so a backend with other limits (8 cores, 1 MiB of scratchpad) gets
// programs planned for those limits. The values live with the backend that
// models them (the emulator: sim_backend/include/spyre/sim/timing_table.h,
// each value with its source); this header only says what they mean.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace spyre::rt {

// Modelled costs of the device's units. A planner uses them to choose
// between plans (tilings, core grids, schedules), a backend to model time.
// `version` changes with any value, and benchmarks report it.
struct CostTable {
  std::string_view version;
  double clock_ghz = 0;  // core clock

  // Matrix unit: MACs per cycle per core by operand dtype; work quantised to
  // tile_m rows of M, one stick of N and tile_k of K; a fixed cost per
  // instruction; a B operand that is not row-contiguous is slower by a factor.
  uint32_t matmul_macs_fp16 = 0;
  uint32_t matmul_macs_int8 = 0;
  uint32_t matmul_macs_fp32 = 0;
  uint32_t matmul_tile_m = 0;
  uint32_t matmul_tile_k = 0;
  uint32_t matmul_fixed_cycles = 0;
  double matmul_transposed_b_factor = 0;

  // Vector unit: bytes of the widest operand per cycle, factors for the
  // kinds of op and operand access, and a fixed latency per instruction.
  uint32_t vector_bytes_per_cycle = 0;
  double vector_transcendental_factor = 0;
  double vector_divide_factor = 0;
  double vector_broadcast_factor = 0;
  double vector_strided_factor = 0;
  uint32_t vector_fixed_cycles = 0;
  double reduce_arg_factor = 0;
  double rand_factor = 0;

  // Per-core DMA engine between device memory and the scratchpad.
  uint32_t dma_bytes_per_cycle = 0;
  uint32_t dma_latency_cycles = 0;
  uint32_t dma_cycles_per_run = 0;
  uint32_t dma_cycles_per_gather_row = 0;
  // Device memory: aggregate bandwidth, the turnaround a launch that both
  // reads and writes it pays per byte of the smaller side (the bus turns
  // between directions), and how many cores one broadcast read (a share
  // group) can serve.
  double dram_gb_per_s = 0;
  double dram_turnaround_ns_per_byte = 0;
  uint32_t max_broadcast_cores = 0;

  // Ring between cores: bytes per cycle per link and direction, per hop,
  // per send and per receive.
  uint32_t ring_bytes_per_cycle = 0;
  uint32_t ring_hop_cycles = 0;
  uint32_t ring_send_fixed_cycles = 0;
  uint32_t ring_recv_cycles = 0;

  // On-chip transpose pipeline: a ring transfer whose receive lands its
  // sticks transposed (program.h, StickTranspose) moves at this many bytes
  // per cycle per core, plus per transfer
  // relayout_run_ns + relayout_run_ns_per_log2_split * log2(split) ns, where
  // split is how many cores the program spreads over.
  uint32_t relayout_bytes_per_cycle = 0;
  double relayout_run_ns = 0;
  double relayout_run_ns_per_log2_split = 0;

  // Per launch, and copies over the host link and on the device.
  double launch_overhead_ns = 0;
  double host_link_gb_per_s = 0;
  double host_copy_latency_ns = 0;
  double device_copy_latency_ns = 0;

  // Card-to-card link (peer copies, collectives between cards): rate per
  // direction, full duplex, and a fixed cost per transfer.
  double card_link_gb_per_s = 0;
  double card_link_latency_ns = 0;

  // Device-memory bytes the whole chip moves per core cycle.
  double dram_bytes_per_cycle() const { return dram_gb_per_s / clock_ghz; }
  // Cycles the device memory is busy for a launch reading `read` and
  // writing `written` bytes: both at the aggregate rate, plus the turnaround
  // on their overlap.
  double dram_cycles(double read, double written) const {
    return (read + written) / dram_bytes_per_cycle() +
           std::min(read, written) * dram_turnaround_ns_per_byte * clock_ghz;
  }
  // Cycles of one transfer through the transpose pipeline of `bytes` in a
  // program spread over `split` cores.
  uint64_t relayout_transfer_cycles(uint64_t bytes, uint32_t split) const {
    const double run_ns = relayout_run_ns + relayout_run_ns_per_log2_split *
                                                std::log2(std::max(split, 1u));
    const uint64_t rate = std::max(relayout_bytes_per_cycle, 1u);
    return static_cast<uint64_t>(std::ceil(std::max(run_ns, 0.0) * clock_ghz)) +
           (bytes + rate - 1) / rate;
  }
  // Modelled time of one card-to-card transfer of `bytes`. The link is full
  // duplex: a card that sends and receives at once pays for the larger side.
  double card_link_ns(uint64_t bytes) const {
    return card_link_latency_ns +
           static_cast<double>(bytes) / card_link_gb_per_s;
  }
};

struct ChipFigures {
  uint32_t num_cores = 0;
  uint32_t scratchpad_bytes = 0;  // per core
  // Scratchpad bytes per core the device software keeps for itself; a
  // planner never uses them.
  uint32_t scratchpad_reserve = 0;
  CostTable costs;

  uint32_t scratchpad_budget() const {
    return scratchpad_bytes - scratchpad_reserve;
  }
};

}  // namespace spyre::rt
