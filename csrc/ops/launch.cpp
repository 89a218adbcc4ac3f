#include "ops/launch.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "device_state.h"
#include "spyre/runtime/stream.h"
#include "storage_ops.h"

namespace spyre::torch_glue {
namespace ops {
namespace {

struct Counters {
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> program_hits{0};
  std::atomic<uint64_t> program_misses{0};
  std::atomic<uint64_t> device_materializations{0};
  std::atomic<uint64_t> host_materializations{0};
  std::atomic<uint64_t> program_evictions{0};
};

Counters& counters() {
  static Counters all;
  return all;
}

// Modelled device time of work that ran; added to on the streams' threads.
class DeviceTimeTotals {
 public:
  void add_launch(const rt::LaunchStats& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.launches;
    stats_.launch_ns += s.time_ns;
    stats_.launch_dma_bytes += s.dma_bytes;
  }
  void add_copy(double ns, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.copies;
    stats_.copy_ns += ns;
    stats_.copy_bytes += bytes;
  }
  DeviceTimeStats get() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = DeviceTimeStats{};
  }

 private:
  std::mutex mutex_;
  DeviceTimeStats stats_;
};

DeviceTimeTotals& device_time_totals() {
  static DeviceTimeTotals totals;
  return totals;
}

// What a finished launch reports: the last-launch figures of its device and
// the cumulative totals.
void record_finished_launch(c10::DeviceIndex device,
                            const rt::LaunchStats& stats) {
  rt::Runtime::get().record_launch_stats(device, stats);
  device_time_totals().add_launch(stats);
}

// The family of a program for profiles: its name without the shape suffix
// kernels append ("matmul_64x128x256" -> "matmul"), so key_averages() groups
// all shapes of one kernel.
std::string profiler_name(const rt::Program& program) {
  const std::string& name = program.name;
  size_t end = name.size();
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] == '_' &&
        std::isdigit(static_cast<unsigned char>(name[i + 1]))) {
      end = i;
      break;
    }
  }
  return "spyre::" + name.substr(0, end);
}

// A torch.profiler range around a launch (free when no profiler is on).
class LaunchRange {
 public:
  explicit LaunchRange(const rt::LoadedProgram& program)
      : range_(at::RecordScope::FUNCTION) {
    if (range_.isActive()) {
      name_ = profiler_name(program.program());
      range_.before(std::string_view(name_));
    }
  }

 private:
  std::string name_;
  at::RecordFunction range_;
};

// Loaded programs of one device. Entries are never removed: launches queued
// on a stream refer to their program until they ran.
class ProgramCache {
 public:
  const rt::LoadedProgram& get(c10::DeviceIndex device, const std::string& key,
                               c10::function_ref<rt::Program()> build) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = programs_.find(key);
      if (it != programs_.end()) {
        ++counters().program_hits;
        return *it->second;
      }
    }
    // Built and loaded outside the lock: another thread may race us to the
    // same key; the first entry wins and ours is dropped unused.
    auto loaded = call_runtime([&] {
      return std::make_unique<rt::LoadedProgram>(runtime_device(device),
                                                 build());
    });
    ++counters().program_misses;
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, inserted] = programs_.try_emplace(key, std::move(loaded));
    return *it->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<rt::LoadedProgram>> programs_;
};

constexpr size_t kMaxDevices = 64;

void check_device_index(c10::DeviceIndex device) {
  TORCH_CHECK_VALUE(device >= 0 && device < static_cast<int>(kMaxDevices),
                    "spyre: device index ", device, " out of range");
}

ProgramCache& cache_of(c10::DeviceIndex device) {
  static std::array<ProgramCache, kMaxDevices> caches;
  check_device_index(device);
  return caches[static_cast<size_t>(device)];
}

size_t capacity_from_environment() {
  const char* text = std::getenv("SPYRE_PROGRAM_CACHE_SIZE");
  if (text == nullptr || *text == '\0') return kDefaultProgramCacheCapacity;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  TORCH_CHECK_VALUE(*end == '\0' && value > 0,
                    "spyre: SPYRE_PROGRAM_CACHE_SIZE must be a positive "
                    "number of programs, got '",
                    text, "'");
  return static_cast<size_t>(value);
}

std::atomic<size_t>& capacity_setting() {
  static std::atomic<size_t> capacity{capacity_from_environment()};
  return capacity;
}

// Loaded programs of one device, least recently used evicted beyond the
// capacity. Entries are shared: a launch still queued keeps its program
// alive after eviction.
class BoundedProgramCache {
 public:
  using Program = std::shared_ptr<const rt::LoadedProgram>;

  // The program under `key` (now the most recent), or null.
  Program find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    ++counters().program_hits;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  Program get(c10::DeviceIndex device, const std::string& key,
              c10::function_ref<rt::Program()> build) {
    if (Program found = find(key)) return found;
    // Built and loaded outside the lock: a racing thread's entry for the
    // same key wins and ours is dropped unused.
    Program loaded = call_runtime([&] {
      return std::make_shared<const rt::LoadedProgram>(runtime_device(device),
                                                       build());
    });
    ++counters().program_misses;
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, inserted] = index_.try_emplace(key);
    if (!inserted) return it->second->second;
    order_.emplace_front(key, std::move(loaded));
    it->second = order_.begin();
    evict_beyond(capacity_setting().load());
    return order_.front().second;
  }

  void shrink_to(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    evict_beyond(capacity);
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return index_.size();
  }

 private:
  void evict_beyond(size_t capacity) {
    while (index_.size() > capacity) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++counters().program_evictions;
    }
  }

  std::mutex mutex_;
  std::list<std::pair<std::string, Program>> order_;  // most recent first
  std::unordered_map<std::string,
                     std::list<std::pair<std::string, Program>>::iterator>
      index_;
};

std::array<BoundedProgramCache, kMaxDevices>& bounded_caches() {
  static std::array<BoundedProgramCache, kMaxDevices> caches;
  return caches;
}

BoundedProgramCache& bounded_cache_of(c10::DeviceIndex device) {
  check_device_index(device);
  return bounded_caches()[static_cast<size_t>(device)];
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t j = sizes.size(); j-- > 1;) {
    strides[j - 1] = strides[j] * sizes[j];
  }
  return strides;
}

// Per host dim: the device byte stride of a step, for layouts where every
// non-stick host dim is walked by exactly one device dim with step 1 and the
// stick host dim by the stick plus at most one dim stepping whole sticks.
// Returns false for other layouts. `stick_stride` gets the bytes between
// consecutive sticks of a row.
bool host_dim_coefficients(const DeviceLayout& layout,
                           std::vector<int64_t>& coeff, int64_t& stick_dim,
                           int64_t& stick_stride) {
  const size_t m = layout.device_size.size();
  const int64_t per_stick = layout.elements_per_stick();
  std::vector<int64_t> device_strides(m, 0);  // bytes, for k < m - 1
  int64_t bytes = rt::kStickBytes;
  for (size_t k = m - 1; k-- > 0;) {
    device_strides[k] = bytes;
    bytes *= layout.device_size[k];
  }
  stick_dim = layout.dim_map[m - 1];
  stick_stride = rt::kStickBytes;
  coeff.assign(layout.host_sizes.size(), -1);
  std::vector<int> walkers(layout.host_sizes.size(), 0);
  for (size_t k = 0; k + 1 < m; ++k) {
    const int64_t j = layout.dim_map[k];
    if (j < 0) continue;  // synthetic, size 1
    ++walkers[j];
    if (j == stick_dim) {
      if (layout.dim_step[k] != per_stick) return false;
      stick_stride = device_strides[k];
    } else {
      if (layout.dim_step[k] != 1) return false;
      coeff[j] = device_strides[k];
    }
  }
  for (size_t j = 0; j < walkers.size(); ++j) {
    if (walkers[j] > 1) return false;
    if (static_cast<int64_t>(j) == stick_dim) {
      if (walkers[j] == 0 && layout.host_sizes[j] > per_stick) return false;
    } else if (walkers[j] == 0 && layout.host_sizes[j] > 1) {
      return false;
    } else if (walkers[j] == 0) {
      coeff[j] = 0;
    }
  }
  return true;
}

at::Tensor empty_like_default(const at::Tensor& tensor) {
  return at::empty(tensor.sizes(), tensor.options());
}

// dst's elements <- src's (same shape), through dst's host image: the
// general path for views no kernel can address.
void write_through_host(const at::Tensor& src, const at::Tensor& dst) {
  ++counters().host_materializations;
  const at::Tensor values = src.cpu();
  at::Tensor image = host_image(dst.storage());
  const int64_t elements = image.numel() / dst.element_size();
  at::from_blob(image.data_ptr(), {elements},
                at::TensorOptions().dtype(dst.scalar_type()))
      .as_strided(dst.sizes(), dst.strides(), dst.storage_offset())
      .copy_(values);
  write_image(dst.storage(), image.data_ptr<uint8_t>(), false);
}

}  // namespace

bool composite_must_decompose(std::initializer_list<const at::Tensor*> args) {
  const auto traced = c10::DispatchKeySet(
      {c10::DispatchKey::Python, c10::DispatchKey::Functionalize});
  for (const at::Tensor* t : args) {
    if (t == nullptr || !t->defined()) continue;
    if (at::GradMode::is_enabled() && t->requires_grad()) return true;
    if (!(t->key_set() & traced).empty()) return true;
  }
  return false;
}

std::optional<rt::DType> maybe_device_dtype(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
      return rt::DType::kFloat16;
    case at::kBFloat16:
      return rt::DType::kBFloat16;
    case at::kFloat:
      return rt::DType::kFloat32;
    case at::kChar:
      return rt::DType::kInt8;
    case at::kInt:
      return rt::DType::kInt32;
    case at::kLong:
      return rt::DType::kInt64;
    case at::kBool:
      return rt::DType::kBool;
    case at::kByte:
      return rt::DType::kUInt8;
    default:
      return std::nullopt;
  }
}

bool has_device_dtype(at::ScalarType type) {
  return maybe_device_dtype(type).has_value();
}

rt::DType device_dtype(at::ScalarType type) {
  auto dtype = maybe_device_dtype(type);
  TORCH_CHECK_TYPE(dtype.has_value(), "spyre: dtype ", type,
                   " has no device representation for kernels");
  return *dtype;
}

const rt::LoadedProgram& cached_program(
    c10::DeviceIndex device, const std::string& key,
    c10::function_ref<rt::Program()> build) {
  return cache_of(device).get(device, key, build);
}

rt::ArgBinding bind(const at::Tensor& tensor) {
  const Allocation& allocation = allocation_of(tensor.storage());
  rt::ArgBinding binding;
  binding.ptr = allocation.ptr;
  binding.bytes = allocation.layout->device_bytes();
  binding.dtype = device_dtype(tensor.scalar_type());
  binding.device_size = allocation.layout->device_size;
  return binding;
}

namespace {

// Binds `tensors` to the program's slots and queues the launch on the
// current stream of their device. `owner` (may be null) keeps the program
// alive until the launch ran; the storages are kept alive likewise.
void launch_program(const rt::LoadedProgram& program,
                    std::shared_ptr<const rt::LoadedProgram> owner,
                    c10::ArrayRef<at::Tensor> tensors) {
  TORCH_CHECK(!tensors.empty(), "spyre: a launch needs tensors");
  const LaunchRange range(program);
  const c10::Device device = tensors[0].device();
  std::vector<rt::ArgBinding> bindings;
  std::vector<c10::Storage> keep;
  bindings.reserve(tensors.size());
  keep.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    TORCH_CHECK_VALUE(tensor.device() == device,
                      "spyre: expected all tensors on ", device, ", got ",
                      tensor.device());
    bindings.push_back(bind(tensor));
    keep.push_back(tensor.storage());
  }
  const c10::DeviceIndex index = device.index();
  rt::Stream& stream = runtime_stream(current_stream(index));
  call_runtime([&] {
    program.launch(
        stream, bindings,
        [index, owner = std::move(owner), keep = std::move(keep)](
            const rt::LaunchStats& s) { record_finished_launch(index, s); });
  });
  ++counters().launches;
}

}  // namespace

void launch(const rt::LoadedProgram& program,
            c10::ArrayRef<at::Tensor> tensors) {
  launch_program(program, nullptr, tensors);
}

void launch_cached(c10::DeviceIndex device, const std::string& key,
                   c10::function_ref<rt::Program()> build,
                   c10::ArrayRef<at::Tensor> tensors) {
  std::shared_ptr<const rt::LoadedProgram> program =
      bounded_cache_of(device).get(device, key, build);
  const rt::LoadedProgram& loaded = *program;
  launch_program(loaded, std::move(program), tensors);
}

size_t program_cache_capacity() { return capacity_setting().load(); }

void set_program_cache_capacity(size_t capacity) {
  TORCH_CHECK_VALUE(capacity > 0,
                    "spyre: the program cache capacity must be at least 1");
  capacity_setting().store(capacity);
  for (BoundedProgramCache& cache : bounded_caches()) cache.shrink_to(capacity);
}

void launch_once(rt::Program program, c10::ArrayRef<at::Tensor> tensors) {
  const c10::DeviceIndex index = tensors.at(0).device().index();
  std::shared_ptr<const rt::LoadedProgram> loaded = call_runtime([&] {
    return std::make_shared<const rt::LoadedProgram>(runtime_device(index),
                                                     std::move(program));
  });
  ++counters().program_misses;
  const rt::LoadedProgram& ref = *loaded;
  launch_program(ref, std::move(loaded), tensors);
}

std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor,
                                                   at::IntArrayRef sizes,
                                                   at::IntArrayRef strides,
                                                   int64_t offset) {
  const DeviceLayout& layout = tensor_layout(tensor);
  const auto dtype = maybe_device_dtype(tensor.scalar_type());
  if (!dtype || layout.element_size != tensor.element_size()) {
    return std::nullopt;
  }
  std::vector<int64_t> coeff;
  int64_t stick_dim = 0, stick_stride = 0;
  if (!host_dim_coefficients(layout, coeff, stick_dim, stick_stride)) {
    return std::nullopt;
  }
  const std::vector<int64_t>& host = layout.host_sizes;
  const std::vector<int64_t> host_strides = contiguous_strides(host);
  // Coordinates of element 0 of the view, and how far the view reaches
  // along each host dim from there.
  std::vector<int64_t> start(host.size()), reach(host.size(), 0);
  int64_t rest = offset;
  for (size_t j = 0; j < host.size(); ++j) {
    start[j] = rest / host_strides[j];
    rest %= host_strides[j];
  }
  if (host.empty() || start[0] >= host[0]) return std::nullopt;

  kernels::StickOperand op;
  op.dtype = *dtype;
  op.stick_stride = stick_stride;
  const size_t n = std::max<size_t>(sizes.size(), 1);
  op.strides.assign(n - 1, 0);
  for (size_t d = 0; d + 1 < sizes.size(); ++d) {
    if (sizes[d] == 1 || strides[d] == 0) continue;
    if (strides[d] < 0) return std::nullopt;
    // The outermost host dim whose stride divides the view's stride.
    size_t j = 0;
    while (j < host.size() && strides[d] % host_strides[j] != 0) ++j;
    if (j == host.size()) return std::nullopt;
    const int64_t steps = strides[d] / host_strides[j];
    if (static_cast<int64_t>(j) == stick_dim) {
      // Only the rows dim of a cols-broadcast view may walk the sticks
      // ([rows, 1] against [rows, cols]).
      const bool rows_dim = d + 2 == sizes.size();
      if (!rows_dim || steps != 1 || strides.back() != 0) return std::nullopt;
      op.cols = kernels::StickOperand::Cols::kRowsAlongSticks;
      reach[j] += sizes[d] - 1;
      continue;
    }
    reach[j] += steps * (sizes[d] - 1);
    op.strides[d] = steps * coeff[j];
  }
  const int64_t cols = sizes.empty() ? 1 : sizes.back();
  const int64_t cols_stride = sizes.empty() ? 0 : strides.back();
  if (op.cols == kernels::StickOperand::Cols::kRowsAlongSticks) {
    // cols broadcast: the element of each row is placed by the rows dim
  } else if (cols_stride == 0) {
    op.cols = kernels::StickOperand::Cols::kBroadcast;
  } else {
    if (cols_stride != 1 || static_cast<int64_t>(host.size()) - 1 != stick_dim)
      return std::nullopt;
    reach[stick_dim] += cols - 1;
  }
  int64_t bytes = 0;
  for (size_t j = 0; j < host.size(); ++j) {
    if (start[j] + reach[j] >= host[j]) return std::nullopt;
    if (static_cast<int64_t>(j) != stick_dim) bytes += start[j] * coeff[j];
  }
  const int64_t per_stick = op.elements_per_stick();
  bytes += start[stick_dim] / per_stick * stick_stride;
  op.offset = static_cast<uint64_t>(bytes);
  op.first = static_cast<uint32_t>(start[stick_dim] % per_stick);
  return op;
}

std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor) {
  return stick_operand(tensor, tensor.sizes(), tensor.strides(),
                       tensor.storage_offset());
}

bool write_needs_read(const at::Tensor& tensor, at::IntArrayRef sizes,
                      const kernels::StickOperand& operand) {
  if (operand.first != 0) return true;
  const int64_t per_stick = operand.elements_per_stick();
  const int64_t cols = sizes.empty() ? 1 : sizes.back();
  if (cols % per_stick == 0) return false;
  // The last stick is partly outside the view: harmless only when the rest
  // is padding, i.e. the view ends its storage row.
  const DeviceLayout& layout = tensor_layout(tensor);
  const int64_t row = layout.host_sizes.back();
  return cols != row;
}

namespace {

// The iteration space of an elementwise launch: out's dims of size > 1 (or
// one dim of size 1), and each operand's strides over it.
struct Iteration {
  std::vector<int64_t> shape;
  std::vector<int64_t> out_dims;  // which dims of out they are
  // out's innermost dim is not contiguous (a column of a matrix): a size-1
  // cols dim is added, so that dim becomes rows of one-element sticks.
  bool synthetic_cols = false;

  // Dims in out's memory order (outermost first), so a permuted output
  // (and inputs permuted alike) still has its sticks along the cols dim.
  explicit Iteration(const at::Tensor& out) {
    for (int64_t d = 0; d < out.dim(); ++d) {
      if (out.size(d) != 1) out_dims.push_back(d);
    }
    std::stable_sort(
        out_dims.begin(), out_dims.end(),
        [&](int64_t a, int64_t b) { return out.stride(a) > out.stride(b); });
    for (int64_t d : out_dims) shape.push_back(out.size(d));
    synthetic_cols = !out_dims.empty() && out.stride(out_dims.back()) != 1;
    if (shape.empty() || synthetic_cols) shape.push_back(1);
  }

  // `t` broadcast to out (aligned at the last dim), as element strides over
  // the iteration; a size-1 cols dim gives the output a unit stride.
  std::vector<int64_t> strides(const at::Tensor& t, int64_t out_rank,
                               bool is_output) const {
    std::vector<int64_t> result;
    result.reserve(shape.size());
    for (int64_t d : out_dims) {
      const int64_t td = d - (out_rank - t.dim());
      result.push_back(td < 0 || t.size(td) == 1 ? 0 : t.stride(td));
    }
    if (result.size() < shape.size()) result.push_back(is_output ? 1 : 0);
    return result;
  }

  const std::vector<int64_t>& sizes() const { return shape; }
};

bool same_view(const at::Tensor& a, const std::vector<int64_t>& a_strides,
               const at::Tensor& b, const std::vector<int64_t>& b_strides) {
  return a.storage_offset() == b.storage_offset() && a_strides == b_strides;
}

// ---- the launch memo ------------------------------------------------------
// Describing an elementwise kernel (operand analysis) and spelling its
// program cache key cost more host time than the rest of an eager launch.
// The memo skips both for a launch seen before: the launch's signature
// (name, steps, device, and every operand's dtype, sizes, strides, offset
// and storage layout: all the kernel is derived from) maps to the cache key
// the full path spelled. Only launches the full path ran on the tensors as
// given are remembered (nothing materialized), and the program cache still
// decides what stays loaded: a hit whose program was evicted takes the full
// path.
class LaunchSignature {
 public:
  // nullopt for launches that always take the full path: random steps (a
  // fresh program each time), operands on other devices (the full path
  // raises), an input sharing out's storage through another view (it is
  // read from a copy).
  static std::optional<LaunchSignature> of(
      const std::string& name, c10::ArrayRef<at::Tensor> inputs,
      const at::Tensor& out, c10::ArrayRef<kernels::ElementwiseStep> steps) {
    LaunchSignature sig;
    sig.add(out.device().index());
    sig.add(static_cast<int64_t>(name.size()));
    for (size_t i = 0; i < name.size(); i += sizeof(int64_t)) {
      int64_t word = 0;
      std::memcpy(&word, name.data() + i,
                  std::min(sizeof(int64_t), name.size() - i));
      sig.add(word);
    }
    sig.add(static_cast<int64_t>(steps.size()));
    for (const kernels::ElementwiseStep& step : steps) {
      if (step.kind == kernels::ElementwiseStep::Kind::kRandom) {
        return std::nullopt;
      }
      sig.add_step(step);
    }
    sig.add(static_cast<int64_t>(inputs.size()));
    for (const at::Tensor& input : inputs) {
      if (input.device() != out.device()) return std::nullopt;
      const bool aliased = input.storage().is_alias_of(out.storage());
      if (aliased &&
          !(input.sizes() == out.sizes() && input.strides() == out.strides() &&
            input.storage_offset() == out.storage_offset())) {
        return std::nullopt;
      }
      sig.add_operand(input);
    }
    sig.add_operand(out);
    return sig;
  }

  std::span<const int64_t> words() const { return words_; }

 private:
  void add(int64_t word) { words_.push_back(word); }
  void add_list(c10::ArrayRef<int64_t> list) {
    add(static_cast<int64_t>(list.size()));
    words_.append(list.begin(), list.end());
  }
  void add_step(const kernels::ElementwiseStep& step) {
    add(static_cast<int64_t>(step.kind));
    add(static_cast<int64_t>(step.op));
    add(static_cast<int64_t>(step.dtype));
    for (int src : step.src) add(src);
    add(step.src1_is_imm);
    add(std::bit_cast<int64_t>(step.imm));
    add(std::bit_cast<int64_t>(step.imm2));
  }
  void add_operand(const at::Tensor& tensor) {
    add(static_cast<int64_t>(tensor.scalar_type()));
    add_list(tensor.sizes());
    add_list(tensor.strides());
    add(tensor.storage_offset());
    const DeviceLayout& layout = tensor_layout(tensor);
    add(layout.element_size);
    add_list(layout.host_sizes);
    add_list(layout.device_size);
    add_list(layout.dim_map);
    add_list(layout.dim_step);
  }

  c10::SmallVector<int64_t, 96> words_;
};

// Per thread, so a lookup takes no lock. Bounded: a process cycling through
// many shapes forgets them all at once when it is full (remembering is
// cheap, the full path only costs what it cost before the memo).
class LaunchMemo {
 public:
  static LaunchMemo& of_this_thread() {
    thread_local LaunchMemo memo;
    return memo;
  }

  const std::string* find(const LaunchSignature& signature) const {
    auto it = keys_.find(signature.words());
    return it == keys_.end() ? nullptr : &it->second;
  }

  void remember(const LaunchSignature& signature, const std::string& key) {
    if (keys_.size() >= kCapacity) keys_.clear();
    const std::span<const int64_t> words = signature.words();
    keys_.try_emplace(std::vector<int64_t>(words.begin(), words.end()), key);
  }

 private:
  static constexpr size_t kCapacity = 1024;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::span<const int64_t> words) const {
      uint64_t h = 0xcbf29ce484222325ull;
      for (int64_t w : words) {
        h = (h ^ static_cast<uint64_t>(w)) * 0x100000001b3ull;
        h ^= h >> 29;
      }
      return static_cast<size_t>(h);
    }
  };
  struct Equal {
    using is_transparent = void;
    bool operator()(std::span<const int64_t> a,
                    std::span<const int64_t> b) const {
      return std::ranges::equal(a, b);
    }
  };
  std::unordered_map<std::vector<int64_t>, std::string, Hash, Equal> keys_;
};

// Runs a launch the memo knows on the tensors as given; false when it does
// not know it or its program is no longer loaded.
bool launch_remembered(const LaunchSignature& signature,
                       c10::ArrayRef<at::Tensor> inputs,
                       const at::Tensor& out) {
  const std::string* key = LaunchMemo::of_this_thread().find(signature);
  if (key == nullptr) return false;
  std::shared_ptr<const rt::LoadedProgram> program =
      bounded_cache_of(out.device().index()).find(*key);
  if (!program) return false;
  c10::SmallVector<at::Tensor, 4> tensors(inputs.begin(), inputs.end());
  tensors.push_back(out);
  const rt::LoadedProgram& loaded = *program;
  launch_program(loaded, std::move(program), tensors);
  return true;
}

}  // namespace

// A device copy into a fresh tensor works when the copy kernel can read
// `tensor` over the fresh tensor's iteration; a column view copied into a
// row of sticks cannot (it would itself need materializing), so it goes
// through the host.
at::Tensor materialize(const at::Tensor& tensor) {
  at::Tensor fresh = empty_like_default(tensor);
  if (tensor.numel() == 0) return fresh;
  const Iteration it(fresh);
  if (stick_operand(tensor, it.sizes(), it.strides(tensor, fresh.dim(), false),
                    tensor.storage_offset())
          .has_value()) {
    ++counters().device_materializations;
    launch_elementwise("copy", {tensor}, fresh, {kernels::copy_step()});
    return fresh;
  }
  write_through_host(tensor, fresh);
  return fresh;
}

at::Tensor addressable(const at::Tensor& tensor) {
  if (tensor.numel() == 0 || stick_operand(tensor).has_value()) return tensor;
  return materialize(tensor);
}

void launch_elementwise(const std::string& name,
                        c10::ArrayRef<at::Tensor> inputs, const at::Tensor& out,
                        c10::ArrayRef<kernels::ElementwiseStep> steps) {
  if (out.numel() == 0) return;
  const auto signature = LaunchSignature::of(name, inputs, out, steps);
  if (signature && launch_remembered(*signature, inputs, out)) return;
  const Iteration it(out);
  const std::vector<int64_t>& sizes = it.sizes();
  const std::vector<int64_t> out_strides = it.strides(out, out.dim(), true);
  auto out_operand =
      stick_operand(out, sizes, out_strides, out.storage_offset());
  if (!out_operand) {
    at::Tensor fresh = empty_like_default(out);
    launch_elementwise(name, inputs, fresh, steps);
    write_through_host(fresh, out);
    return;
  }
  kernels::ElementwiseKernel kernel;
  kernel.name = name;
  kernel.target = {device_chip(out.device().index())};
  kernel.shape = sizes;
  kernel.output = *out_operand;
  kernel.output_read_modify_write = write_needs_read(out, sizes, *out_operand);
  kernel.steps.assign(steps.begin(), steps.end());
  std::vector<at::Tensor> tensors;
  tensors.reserve(inputs.size() + 1);
  bool as_given = true;  // no input replaced by a copy
  for (const at::Tensor& given : inputs) {
    TORCH_CHECK_VALUE(given.device() == out.device(), "spyre: ", name,
                      ": expected all tensors on ", out.device(), ", got ",
                      given.device());
    at::Tensor input = given;
    std::vector<int64_t> strides = it.strides(input, out.dim(), false);
    // An input sharing the output's storage through another view could be
    // read by one core after another core wrote it: read a copy instead.
    if (input.storage().is_alias_of(out.storage()) &&
        !same_view(input, strides, out, out_strides)) {
      input = materialize(input);
      strides = it.strides(input, out.dim(), false);
    }
    auto operand = stick_operand(input, sizes, strides, input.storage_offset());
    if (!operand) {
      input = materialize(input);
      strides = it.strides(input, out.dim(), false);
      operand = stick_operand(input, sizes, strides, 0);
    }
    if (!operand) {  // broadcast the way this layout cannot: expand it
      input = materialize(input.expand(out.sizes()));
      strides = it.strides(input, out.dim(), false);
      operand = stick_operand(input, sizes, strides, 0);
    }
    if (!operand) {
      // out runs in another memory order than any default layout (a
      // permuted out=): lay the input out like out, through the host.
      at::Tensor like =
          at::empty_strided(out.sizes(), out.strides(), input.options());
      write_through_host(input.expand(out.sizes()), like);
      input = like;
      strides = it.strides(input, out.dim(), false);
      operand = stick_operand(input, sizes, strides, 0);
    }
    TORCH_INTERNAL_ASSERT(operand.has_value(), "spyre: ", name,
                          ": a materialized input is not addressable");
    as_given = as_given && input.is_same(given);
    kernel.inputs.push_back(*operand);
    tensors.push_back(std::move(input));
  }
  tensors.push_back(out);
  const bool random = std::any_of(
      steps.begin(), steps.end(), [](const kernels::ElementwiseStep& step) {
        return step.kind == kernels::ElementwiseStep::Kind::kRandom;
      });
  if (random) {  // a fresh generator state: a program that never repeats
    launch_once(kernels::build_elementwise(kernel), tensors);
    return;
  }
  std::string key;
  key.reserve(256);
  kernel.append_key(key);
  launch_cached(
      out.device().index(), key,
      [&] { return kernels::build_elementwise(kernel); }, tensors);
  if (signature && as_given) {
    LaunchMemo::of_this_thread().remember(*signature, key);
  }
}

void device_copy(const at::Tensor& src, const at::Tensor& dst) {
  const bool to_bool =
      dst.scalar_type() == at::kBool && src.scalar_type() != at::kBool;
  const kernels::ElementwiseStep step =
      to_bool ? kernels::scalar_step(rt::VecOp::kNe, 0, 0, rt::DType::kBool)
              : kernels::copy_step();
  launch_elementwise("copy", {src}, dst, {step});
}

OpStats op_stats() {
  const Counters& c = counters();
  size_t cached = 0;
  for (BoundedProgramCache& cache : bounded_caches()) cached += cache.size();
  return OpStats{c.launches,
                 c.program_hits,
                 c.program_misses,
                 c.device_materializations,
                 c.host_materializations,
                 c.program_evictions,
                 cached};
}

void reset_op_stats() {
  Counters& c = counters();
  c.launches = 0;
  c.program_hits = 0;
  c.program_misses = 0;
  c.device_materializations = 0;
  c.host_materializations = 0;
  c.program_evictions = 0;
}

DeviceTimeStats device_time_stats() { return device_time_totals().get(); }

void reset_device_time_stats() { device_time_totals().reset(); }

void record_copy_time(double ns, uint64_t bytes) {
  device_time_totals().add_copy(ns, bytes);
}

}  // namespace ops
}  // namespace spyre::torch_glue
