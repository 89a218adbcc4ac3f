// Instruction costs and the static dataflow schedule.
//
// The schedule is a discrete-event list schedule over all cores: each core
// has one queue per engine (program order within an engine). An instruction
// starts at max(its engine free, all its dependencies done); at every step
// the instruction with the earliest possible start is placed, so the shared
// DRAM server sees transfers in time order and serves them first come,
// first served at the aggregate bandwidth.
#include "timing.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <tuple>

#include "dataflow/executable.h"
#include "spyre/runtime/error.h"
#include "vector_ops.h"

namespace spyre::sim {
namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint64_t scaled(double cycles) {
  return static_cast<uint64_t>(std::ceil(cycles));
}

uint32_t matmul_macs_per_cycle(rt::DType dtype, const rt::CostTable& table) {
  switch (dtype) {
    case rt::DType::kInt8:
      return table.matmul_macs_int8;
    case rt::DType::kFloat32:
      return table.matmul_macs_fp32;
    default:
      return table.matmul_macs_fp16;
  }
}

bool is_transcendental(rt::VecOp op) {
  return is_transcendental_unary(op) || op == rt::VecOp::kPow;
}

bool is_divide_like(rt::VecOp op) {
  return op == rt::VecOp::kDiv || op == rt::VecOp::kRemainder ||
         is_root_or_reciprocal(op);
}

// How an operand's column access slows the vector unit.
double access_factor(const rt::Tile& tile, uint32_t cols,
                     const rt::CostTable& table) {
  if (cols <= 1) return 1.0;
  if (tile.col_stride == static_cast<int32_t>(rt::element_size(tile.dtype))) {
    return 1.0;
  }
  if (tile.col_stride == 0) return table.vector_broadcast_factor;
  return table.vector_strided_factor;
}

// Cycles for `rows` x `cols` elements of `width` bytes at one stick a cycle.
uint64_t stick_cycles(uint32_t rows, uint32_t cols, uint32_t width,
                      const rt::CostTable& table) {
  return uint64_t{rows} *
         ceil_div(uint64_t{cols} * width, table.vector_bytes_per_cycle);
}

}  // namespace

uint64_t matmul_cycles(const rt::MatMul& mm, const rt::CostTable& table) {
  uint64_t tile_n = rt::elements_per_stick(mm.b.dtype);
  uint64_t tiles = ceil_div(mm.m, table.matmul_tile_m) *
                   ceil_div(mm.n, tile_n) * ceil_div(mm.k, table.matmul_tile_k);
  double macs = static_cast<double>(tiles) * table.matmul_tile_m * tile_n *
                table.matmul_tile_k;
  double cycles = macs / matmul_macs_per_cycle(mm.a.dtype, table);
  bool b_row_contiguous =
      mm.n <= 1 ||
      mm.b.col_stride == static_cast<int32_t>(rt::element_size(mm.b.dtype));
  if (!b_row_contiguous) cycles *= table.matmul_transposed_b_factor;
  return table.matmul_fixed_cycles + scaled(cycles);
}

uint64_t vector_cycles(const rt::Vector& v, const rt::CostTable& table) {
  int arity = rt::vec_op_arity(v.op);
  const rt::Tile* sources[] = {&v.src0, &v.src1, &v.src2};
  uint32_t width = rt::element_size(v.dst.dtype);
  double access = access_factor(v.dst, v.cols, table);
  for (int s = 0; s < arity; ++s) {
    if (s == 1 && v.src1_is_imm) continue;
    width = std::max(width, rt::element_size(sources[s]->dtype));
    access = std::max(access, access_factor(*sources[s], v.cols, table));
  }
  double op = is_transcendental(v.op) ? table.vector_transcendental_factor
              : is_divide_like(v.op)  ? table.vector_divide_factor
                                      : 1.0;
  double sticks =
      static_cast<double>(stick_cycles(v.rows, v.cols, width, table));
  return table.vector_fixed_cycles + scaled(sticks * op * access);
}

uint64_t reduce_cycles(const rt::Reduce& r, const rt::CostTable& table) {
  bool arg = r.op == rt::RedOp::kArgMax || r.op == rt::RedOp::kArgMin;
  double sticks = static_cast<double>(
      stick_cycles(r.rows, r.cols, rt::element_size(r.src.dtype), table));
  double factor = (arg ? table.reduce_arg_factor : 1.0) *
                  access_factor(r.src, r.cols, table);
  return table.vector_fixed_cycles + scaled(sticks * factor);
}

uint64_t rand_cycles(const rt::RandFill& r, const rt::CostTable& table) {
  double sticks = static_cast<double>(
      stick_cycles(r.rows, r.cols, rt::element_size(r.dst.dtype), table));
  return table.vector_fixed_cycles + scaled(sticks * table.rand_factor);
}

uint64_t dma_stream_cycles(uint64_t bytes, uint64_t runs,
                           const rt::CostTable& table) {
  return ceil_div(bytes, table.dma_bytes_per_cycle) +
         runs * table.dma_cycles_per_run;
}

double host_copy_ns(uint64_t bytes, const rt::CostTable& table) {
  return table.host_copy_latency_ns +
         static_cast<double>(bytes) / table.host_link_gb_per_s;
}

double device_copy_ns(uint64_t bytes_read, uint64_t bytes_written,
                      const rt::CostTable& table) {
  return table.device_copy_latency_ns +
         table.dram_cycles(static_cast<double>(bytes_read),
                           static_cast<double>(bytes_written)) /
             table.clock_ghz;
}

double dram_bytes_per_cycle(const rt::CostTable& table) {
  return table.dram_gb_per_s / table.clock_ghz;
}

namespace {

// The identity of a broadcast read: same group and same source bytes.
using BroadcastKey = std::tuple<uint32_t, uint32_t, uint64_t, uint32_t,
                                uint32_t, uint32_t, int64_t, int64_t>;

class Scheduler {
 public:
  Scheduler(SimExecutable& exe, const rt::CostTable& table, uint32_t num_cores)
      : exe_(exe), table_(table), num_cores_(num_cores) {
    size_t n = exe.cores.size();
    queues_.resize(n);
    heads_.assign(n, {});
    engine_free_.assign(n, {});
    waiting_on_.resize(n);
    dependents_.resize(n);
    for (size_t c = 0; c < n; ++c) {
      const DecodedCore& core = exe.cores[c];
      waiting_on_[c].assign(core.insts.size(), 0);
      dependents_[c].resize(core.insts.size());
      for (uint32_t i = 0; i < core.insts.size(); ++i) {
        queues_[c][static_cast<int>(core.insts[i].engine)].push_back(i);
      }
      remaining_ += core.insts.size();
    }
    for (size_t c = 0; c < n; ++c) {
      const DecodedCore& core = exe.cores[c];
      for (uint32_t i = 0; i < core.insts.size(); ++i) {
        for (const InstRef& dep : core.insts[i].deps) {
          ++waiting_on_[c][i];
          dependents_[dep.core_index][dep.instruction].push_back(
              InstRef{static_cast<uint32_t>(c), i});
        }
      }
    }
  }

  // Event-driven: the heads of the engine queues whose dependencies are all
  // done wait in a heap ordered by (start, core, engine). A head's start
  // cannot change while it waits (its engine is busy with nothing else and
  // its dependencies are placed), so the earliest is always the heap's top;
  // ties go to the lowest core, then engine, as a scan in that order would.
  void run() {
    for (size_t c = 0; c < queues_.size(); ++c) {
      for (int e = 0; e < kNumEngines; ++e) offer(c, e);
    }
    while (remaining_ > 0) {
      if (ready_.empty()) {
        exe_.deadlock = describe_stall();
        return;
      }
      const auto [start, c, e] = ready_.top();
      ready_.pop();
      const uint32_t placed = queues_[c][e][heads_[c][e]];
      place(c, e, start);
      offer(c, e);
      for (const InstRef& next : dependents_[c][placed]) {
        if (--waiting_on_[next.core_index][next.instruction] == 0) {
          offer_if_head(next);
        }
      }
    }
  }

 private:
  using Candidate = std::tuple<uint64_t, size_t, int>;  // start, core, engine

  // Queues the head of (core, engine) if its dependencies are all done.
  void offer(size_t c, int e) {
    uint64_t start;
    if (ready(c, e, start)) ready_.emplace(start, c, e);
  }

  void offer_if_head(InstRef ref) {
    const DecodedInst& d = exe_.at(ref);
    const int e = static_cast<int>(d.engine);
    const auto& queue = queues_[ref.core_index][e];
    const size_t head = heads_[ref.core_index][e];
    if (head < queue.size() && queue[head] == ref.instruction) {
      offer(ref.core_index, e);
    }
  }

  // Whether the head of (core, engine) can be placed, and when it starts.
  bool ready(size_t c, int e, uint64_t& start) const {
    const auto& queue = queues_[c][e];
    if (heads_[c][e] >= queue.size()) return false;
    const DecodedInst& d = exe_.cores[c].insts[queue[heads_[c][e]]];
    if (waiting_on_[c][queue[heads_[c][e]]] != 0) return false;
    start = engine_free_[c][e];
    for (const InstRef& dep : d.deps) {
      uint64_t available = exe_.at(dep).end;
      if (dep.core_index != c) {  // ring data travelling from another core
        available += uint64_t{table_.ring_hop_cycles} *
                     ring_hops(exe_.cores[dep.core_index].core,
                               exe_.cores[c].core, num_cores_);
      }
      start = std::max(start, available);
    }
    return true;
  }

  void place(size_t c, int e, uint64_t start) {
    uint32_t i = queues_[c][e][heads_[c][e]++];
    DecodedInst& d = exe_.cores[c].insts[i];
    d.start = start;
    d.end = start + duration(d, start);
    engine_free_[c][e] = d.end;
    --remaining_;
  }

  uint64_t duration(const DecodedInst& d, uint64_t start) {
    const rt::Instruction& inst = d.inst;
    if (const auto* mm = std::get_if<rt::MatMul>(&inst)) {
      return matmul_cycles(*mm, table_);
    }
    if (const auto* v = std::get_if<rt::Vector>(&inst)) {
      return vector_cycles(*v, table_);
    }
    if (const auto* r = std::get_if<rt::Reduce>(&inst)) {
      return reduce_cycles(*r, table_);
    }
    if (const auto* r = std::get_if<rt::RandFill>(&inst)) {
      return rand_cycles(*r, table_);
    }
    if (std::holds_alternative<rt::RingSend>(inst)) {
      if (d.through_transpose_pipeline) {
        return table_.relayout_transfer_cycles(
            d.bytes_moved, static_cast<uint32_t>(exe_.cores.size()));
      }
      return table_.ring_send_fixed_cycles +
             ceil_div(d.bytes_moved, table_.ring_bytes_per_cycle);
    }
    if (std::holds_alternative<rt::RingRecv>(inst)) {
      return table_.ring_recv_cycles;
    }
    return dma_duration(d, start);
  }

  uint64_t dma_duration(const DecodedInst& d, uint64_t start) {
    const rt::Instruction& inst = d.inst;
    uint64_t runs = 1;
    uint64_t dram_bytes = d.bytes_moved;
    uint64_t extra = 0;
    const rt::StickTransfer* xfer = nullptr;
    if (const auto* load = std::get_if<rt::DmaLoad>(&inst)) xfer = &load->xfer;
    if (const auto* store = std::get_if<rt::DmaStore>(&inst)) {
      // A masked store moves the same bursts, the mask beside the data;
      // LPDDR5's longer same-bank spacing of masked writes is not modelled.
      xfer = &store->xfer;
    }
    if (xfer != nullptr) {
      runs = uint64_t{xfer->count1} * xfer->count2;
      if (xfer->share_group != 0 && std::holds_alternative<rt::DmaLoad>(inst)) {
        BroadcastKey key{xfer->share_group,  xfer->dram.slot,
                         xfer->dram.offset,  xfer->run_bytes,
                         xfer->count1,       xfer->count2,
                         xfer->dram_stride1, xfer->dram_stride2};
        if (!broadcasts_.insert(key).second) dram_bytes = 0;  // already read
      }
    } else if (const rt::IndexedRows* rows = rt::indexed_rows_of(inst)) {
      runs = rows->count;
      extra = uint64_t{rows->count} * table_.dma_cycles_per_gather_row;
    }
    uint64_t stream = dma_stream_cycles(d.bytes_moved, runs, table_) + extra;
    // The DRAM server: first come, first served at the aggregate rate, plus
    // the turnaround between reads and writes.
    const bool write = std::holds_alternative<rt::DmaStore>(inst) ||
                       std::holds_alternative<rt::DmaScatter>(inst);
    double service = static_cast<double>(dram_bytes) / dram_per_cycle_ +
                     turnaround_cycles(write, dram_bytes);
    double dram_start = std::max(static_cast<double>(start), dram_free_);
    dram_free_ = dram_start + service;
    uint64_t data_done =
        std::max(start + stream, static_cast<uint64_t>(std::ceil(dram_free_)));
    return data_done - start + table_.dma_latency_cycles;
  }

  // The launch's turnaround is dram_turnaround_ns_per_byte * min(bytes
  // read, bytes written) in all (HW: "device memory, balanced 1R:1W"); each
  // transfer pays for what it adds to that overlap.
  double turnaround_cycles(bool write, uint64_t bytes) {
    const double overlap = std::min(dram_read_, dram_written_);
    (write ? dram_written_ : dram_read_) += static_cast<double>(bytes);
    return (std::min(dram_read_, dram_written_) - overlap) *
           table_.dram_turnaround_ns_per_byte * table_.clock_ghz;
  }

  std::string describe_stall() const {
    std::string out = rt::str("sim: program '", exe_.name,
                              "' deadlocks on its ring channels:");
    for (size_t c = 0; c < queues_.size(); ++c) {
      for (int e = 0; e < kNumEngines; ++e) {
        if (heads_[c][e] >= queues_[c][e].size()) continue;
        const DecodedInst& d = exe_.cores[c].insts[queues_[c][e][heads_[c][e]]];
        if (const auto* r = std::get_if<rt::RingRecv>(&d.inst)) {
          out += rt::str(" core ", exe_.cores[c].core, " waits on channel ",
                         r->channel, " from core ", r->src_core, ";");
        }
      }
    }
    return out + " no core can proceed (check send/receive order)";
  }

  SimExecutable& exe_;
  const rt::CostTable& table_;
  uint32_t num_cores_;
  double dram_per_cycle_ = dram_bytes_per_cycle(table_);
  double dram_free_ = 0;
  double dram_read_ = 0, dram_written_ = 0;  // bytes so far
  std::vector<std::array<std::vector<uint32_t>, kNumEngines>> queues_;
  std::vector<std::array<size_t, kNumEngines>> heads_;
  std::vector<std::array<uint64_t, kNumEngines>> engine_free_;
  // per instruction: dependencies not yet placed, and who depends on it
  std::vector<std::vector<uint32_t>> waiting_on_;
  std::vector<std::vector<std::vector<InstRef>>> dependents_;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> ready_;
  std::set<BroadcastKey> broadcasts_;
  size_t remaining_ = 0;
};

// Total length of the union of [start, end) intervals.
uint64_t union_length(std::vector<std::pair<uint64_t, uint64_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  uint64_t total = 0, end = 0;
  for (auto [lo, hi] : spans) {
    lo = std::max(lo, end);
    if (hi > lo) {
      total += hi - lo;
      end = hi;
    }
  }
  return total;
}

void fill_stats(SimExecutable& exe, const rt::CostTable& table,
                uint32_t num_cores) {
  rt::LaunchStats& stats = exe.stats;
  stats = {};
  stats.core_busy_cycles.assign(num_cores, 0);
  uint64_t matrix_busy = 0, vector_busy = 0;
  for (const DecodedCore& core : exe.cores) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const DecodedInst& d : core.insts) {
      stats.cycles = std::max(stats.cycles, d.end);
      spans.emplace_back(d.start, d.end);
      uint64_t length = d.end - d.start;
      if (d.engine == Engine::kMatrix) matrix_busy += length;
      if (d.engine == Engine::kVector) vector_busy += length;
      if (d.engine == Engine::kDma) stats.dma_bytes += d.bytes_moved;
      if (std::holds_alternative<rt::RingSend>(d.inst)) {
        stats.ring_bytes += d.bytes_moved;
      }
    }
    stats.instructions += core.insts.size();
    if (core.core < num_cores) {
      stats.core_busy_cycles[core.core] = union_length(spans);
    }
  }
  exe.host_work = matrix_busy + vector_busy +
                  (stats.dma_bytes + stats.ring_bytes) / rt::kStickBytes;
  stats.time_ns = static_cast<double>(stats.cycles) / table.clock_ghz +
                  table.launch_overhead_ns;
  if (stats.cycles == 0) return;
  double capacity = static_cast<double>(stats.cycles) * num_cores;
  stats.matrix_utilization = static_cast<double>(matrix_busy) / capacity;
  stats.vector_utilization = static_cast<double>(vector_busy) / capacity;
  double sum = 0;
  size_t used = 0;
  for (const DecodedCore& core : exe.cores) {
    if (core.core >= num_cores || core.insts.empty()) continue;
    sum += static_cast<double>(stats.core_busy_cycles[core.core]) /
           static_cast<double>(stats.cycles);
    ++used;
  }
  if (used > 0) stats.core_utilization = sum / static_cast<double>(used);
}

}  // namespace

uint32_t ring_hops(uint32_t from, uint32_t to, uint32_t num_cores) {
  uint32_t forward = (to + num_cores - from) % num_cores;
  return std::min(forward, num_cores - forward);
}

void schedule(SimExecutable& exe, const rt::CostTable& table,
              uint32_t num_cores) {
  Scheduler scheduler(exe, table, num_cores);
  scheduler.run();
  fill_stats(exe, table, num_cores);
}

}  // namespace spyre::sim
