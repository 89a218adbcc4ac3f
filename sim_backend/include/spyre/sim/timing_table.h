// The emulator's one timing parameter table. Every modelled figure (launch
// time, utilisation, copy time) is computed from these values only, so a
// change here changes every figure: bump `version` with any edit, and
// benchmarks report it next to their results.
//
// Each value cites its row in /work/shared/HARDWARE.md ("HW: <row>") or says
// "estimate" with the reasoning behind it.
#pragma once

#include <cstdint>

#include "spyre/runtime/chip.h"

namespace spyre::sim {

inline constexpr rt::CostTable kTimingTable{
    .version = "sim-timing-5",

    // Core clock. Estimate, derived (HW: "Derived estimate"): 1536 MAC/ns per
    // core peak (HW: matrix product row) over ~1024 MAC/cycle per core gives
    // ~1.5 GHz. The roofline source's 1 GHz is not used.
    .clock_ghz = 1.5,

    // Matrix unit, MACs per cycle per core. fp16/bf16: derived as above (two
    // 8x8 arrays with SIMD lanes per PE, HW: "per core" + "Derived estimate").
    // int8: estimate, 2x fp16 (half-width operands, as in the fp8/int4 TOPS
    // ladder of HW's derived estimate). fp32: estimate, 1/4 of fp16 (fp32 is a
    // transient compute format on the chip, HW: data types row, so it runs
    // multi-pass on 16-bit datapaths).
    .matmul_macs_fp16 = 1024,
    .matmul_macs_int8 = 2048,
    .matmul_macs_fp32 = 256,
    // Work is quantised to the array's tile: 16 rows of M (two 8-row arrays,
    // HW: "per core"), one stick of B's dtype along N (HW: stick row), and 8
    // along K (the 8-deep systolic array). Ragged shapes pay for whole tiles.
    .matmul_tile_m = 16,
    .matmul_tile_k = 8,
    // Fill and drain of the systolic pipeline per instruction. Estimate: two
    // array depths plus operand fetch, ~32 cycles.
    .matmul_fixed_cycles = 32,
    // A B operand that is not row-contiguous (consecutive N elements not
    // adjacent) runs this much slower. HW: "transposed matmul operand" row.
    .matmul_transposed_b_factor = 3.5,

    // Vector unit, bytes of the widest operand per cycle for simple ops.
    // Estimate: elementwise work runs on both corelets (HW: "per core", two
    // 8x8 PE arrays plus a 1-D SFU each), limited by how fast the scratchpad
    // feeds them, taken as two 128-byte sticks per corelet per cycle (HW:
    // stick row). The PE arrays' 1024 lanes (HW: "Derived estimate") would
    // allow far more; the scratchpad port is the bound assumed here. The
    // softmax calibration point (HW: one core, 512x1024 fp16, 23.7-32.5 us)
    // cannot be met with one stick per cycle: fp32 intermediates alone need
    // ~100k cycles (~65 us) at that rate.
    .vector_bytes_per_cycle = 512,
    // Transcendental ops (exp, log, tanh, sigmoid, gelu, silu, erf, sin, cos,
    // pow) take this many cycles per stick. Estimate: a polynomial or
    // table-plus-refinement evaluation in ~2 passes.
    .vector_transcendental_factor = 2.0,
    // Divide, sqrt, rsqrt and reciprocal: estimate, one Newton step extra.
    .vector_divide_factor = 1.5,
    // An operand read with a column stride of 0 (a per-row value broadcast
    // along the row) costs this factor: estimate, a lane splat per stick.
    .vector_broadcast_factor = 1.25,
    // An operand with any other non-contiguous column stride is gathered
    // element by element: estimate, 4x (4 lanes' worth of gather per cycle).
    .vector_strided_factor = 4.0,
    // Pipeline latency per vector / reduce / rand instruction. Estimate.
    .vector_fixed_cycles = 16,
    // Arg reductions track an index beside the value: estimate, 2x.
    .reduce_arg_factor = 2.0,
    // Philox-4x32-10 random fill: estimate, ten rounds in ~4 passes a stick.
    .rand_factor = 4.0,

    // Per-core DMA engine. Bandwidth: estimate, 64 B/cycle (96 GB/s at
    // 1.5 GHz). HW says a lone core gets ~11% of the device bandwidth
    // (~17-23 GB/s) but also that one core runs the 512x1024 fp16 softmax in
    // 23.7-32.5 us; those two pull against each other (HW notes so). The model
    // takes the softmax point: one core must stream 2 MiB (in + out) well
    // inside the softmax time, which 17 GB/s (123 us) cannot.
    .dma_bytes_per_cycle = 64,
    // Latency per DMA instruction, issue to last byte in the scratchpad.
    // Estimate: LPDDR5 access ~100-150 ns plus descriptor setup, ~200 ns.
    .dma_latency_cycles = 300,
    // Extra cost per contiguous run of a strided transfer (descriptor step)
    // and per gathered row (an index read plus a random access). Estimates.
    .dma_cycles_per_run = 1,
    .dma_cycles_per_gather_row = 4,
    // Aggregate device-memory bandwidth, shared by all cores through one
    // DRAM server. HW: IBM's fitted "device memory, read-only" row, 150 GB/s
    // peak, measured on cards. (HW's "device memory bandwidth" row, 204.8
    // GB/s, is the constant of torch-spyre's work-division model, not a
    // measurement; sim-timing-3 used it and modelled large kernels ~0.6x of
    // the fit.) Broadcast (share_group) reads are charged once. HW: "device
    // memory bandwidth" row.
    .dram_gb_per_s = 150,
    // The bus turns between reading and writing: a launch pays this per byte
    // of min(bytes read, bytes written). HW: fitted "device memory, balanced
    // 1R:1W" row, T = (R+W)/150 + 0.00574 ns/B * min(R,W).
    .dram_turnaround_ns_per_byte = 0.00574,
    // Cores one broadcast read can serve (planners group cores by it; the
    // emulator charges a share group's read once). HW: same row, "up to 8
    // cores can share one broadcast read".
    .max_broadcast_cores = 8,

    // Ring: 128 bytes per cycle per direction per link. HW: "ring" row. The
    // roofline source's 0.064 TB/s is not used: it is a coarser second source
    // at an assumed 1 GHz, while the ring row is IBM's own figure and equals
    // the stick width, so one stick moves per cycle per link.
    .ring_bytes_per_cycle = 128,
    // Per hop: estimate, router plus wire, ~8 ns.
    .ring_hop_cycles = 12,
    // Setup per send and commit per receive: estimates.
    .ring_send_fixed_cycles = 8,
    .ring_recv_cycles = 1,

    // The on-chip transpose pipeline (a ring transfer that lands its sticks
    // transposed). HW: "scratchpad-to-scratchpad relayout (core to core)",
    // IBM's fit `runs_per_core*(-1.14 + 3.92*log2(split)) ns +
    // span_per_core / 547 GB/s`: 547 GB/s per core at 1.5 GHz is 365 B/cycle,
    // and the per-run terms are the fit's constants. Estimates in using them:
    // one transfer counts as one run, and split is the number of cores the
    // program spreads over. The fitted rate is above one ring link's
    // 128 B/cycle per direction; the model takes it as measured and does not
    // say which links or paths carry it.
    .relayout_bytes_per_cycle = 365,
    .relayout_run_ns = -1.14,
    .relayout_run_ns_per_log2_split = 3.92,

    // Launch overhead added to every launch's modelled time. Estimate: a
    // doorbell and a small patch blob over PCIe (HW: "device address space":
    // programs are patched through a small per-launch patch blob) plus core
    // start, ~3 us. HW's ~20 us "fixed cost per kernel bundle" is a property
    // of the legacy graph-based stack this design removes, so it is not used.
    .launch_overhead_ns = 3000,

    // Host link for copies: PCIe Gen5 x16 (HW: peak row), 64 GB/s raw per
    // direction; estimate ~52 GB/s after 128b/130b coding and TLP headers.
    .host_link_gb_per_s = 52,
    // Per copy: estimate, DMA descriptor + doorbell + completion, ~2 us.
    .host_copy_latency_ns = 2000,
    // On-device copy / fill: read + write through the DRAM server
    // (HW: device memory bandwidth row) plus an estimated 1 us setup.
    .device_copy_latency_ns = 1000,

    // Card to card: peer DMA over each card's PCIe Gen5 x16 link (HW:
    // "Between cards": card-to-card traffic goes over PCIe). Estimate: the
    // host link's effective rate, since both ends are such a link.
    .card_link_gb_per_s = 52,
    // Per transfer: estimate, one descriptor and doorbell on the sending
    // card, the completion crossing the switch back, ~3 us.
    .card_link_latency_ns = 3000,
};

// The modelled chip: what DeviceProperties::chip of every emulated device
// reports, so the kernel builders and the compiler plan for it.
inline constexpr rt::ChipFigures kSpyreChip{
    // HW: "cores" row, 32 per card.
    .num_cores = 32,
    // HW: "scratchpad" row, 2 MiB per core.
    .scratchpad_bytes = 2u << 20,
    // HW: "scratchpad reserve" row, 64 KiB kept by the device software.
    .scratchpad_reserve = 64u << 10,
    .costs = kTimingTable,
};

}  // namespace spyre::sim
