// torch_spyre._C: the Python face of the glue. Loading it loads
// libspyre_torch (guard, hooks, allocator, kernels, fallback register at
// load); these functions back torch.spyre and torch_spyre.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "allocator.h"
#include "device_state.h"
#include "distributed/bindings.h"
#include "events.h"
#include "factory.h"
#include "fallback_stats.h"
#include "generator.h"
#include "ops/launch.h"
#include "pinned_host.h"
#include "program_bindings.h"
#include "spyre/runtime/stream.h"
#include "storage_ops.h"

namespace py = pybind11;
namespace glue = spyre::torch_glue;
namespace rt = spyre::rt;

namespace {

void set_python_error(PyObject* type, const char* message) {
  PyErr_SetString(type, message);
}

void translate_exceptions(std::exception_ptr error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const c10::OutOfMemoryError& e) {
    py::object type = py::module_::import("torch").attr("OutOfMemoryError");
    set_python_error(type.ptr(), e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    set_python_error(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    set_python_error(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    set_python_error(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const rt::Error& e) {
    try {
      glue::rethrow_as_torch_error(e);
    } catch (...) {
      translate_exceptions(std::current_exception());
    }
  } catch (const std::invalid_argument& e) {
    set_python_error(PyExc_ValueError, e.what());
  }
}

py::dict allocator_stats(c10::DeviceIndex index) {
  index = glue::resolve_device_index(index);
  const rt::AllocatorStats s = glue::call_runtime(
      [&] { return glue::runtime_allocator(index).stats(); });
  py::dict out;
  out["allocated_bytes"] = s.allocated_bytes;
  out["reserved_bytes"] = s.reserved_bytes;
  out["peak_allocated_bytes"] = s.peak_allocated_bytes;
  out["peak_reserved_bytes"] = s.peak_reserved_bytes;
  out["requested_bytes"] = s.requested_bytes;
  out["allocation_count"] = s.allocation_count;
  out["segment_count"] = s.segment_count;
  out["num_allocs"] = s.num_allocs;
  out["num_frees"] = s.num_frees;
  out["num_device_allocs"] = s.num_device_allocs;
  out["num_device_frees"] = s.num_device_frees;
  out["num_ooms"] = s.num_ooms;
  out["num_cache_flushes"] = s.num_cache_flushes;
  out["inactive_split_bytes"] = s.inactive_split_bytes;
  out["fragmentation"] = s.fragmentation;
  return out;
}

py::dict device_properties(c10::DeviceIndex index) {
  index = glue::resolve_device_index(index);
  const rt::DeviceProperties& p = glue::runtime_device(index).properties();
  py::dict out;
  out["name"] = p.name;
  out["backend"] = p.backend;
  out["index"] = p.index;
  out["num_cores"] = p.chip.num_cores;
  out["scratchpad_bytes"] = p.chip.scratchpad_bytes;
  out["scratchpad_reserve"] = p.chip.scratchpad_reserve;
  out["stick_bytes"] = rt::kStickBytes;
  out["total_memory"] = p.memory_bytes;
  out["clock_ghz"] = p.chip.costs.clock_ghz;
  out["timing_table_version"] = std::string(p.chip.costs.version);
  out["launch_overhead_ns"] = p.chip.costs.launch_overhead_ns;
  out["card_link_gb_per_s"] = p.chip.costs.card_link_gb_per_s;
  out["card_link_latency_ns"] = p.chip.costs.card_link_latency_ns;
  return out;
}

py::dict last_launch_stats(c10::DeviceIndex index) {
  index = glue::resolve_device_index(index);
  const rt::LaunchStats s = glue::call_runtime(
      [&] { return glue::runtime().last_launch_stats(index); });
  py::dict out;
  out["cycles"] = s.cycles;
  out["time_ns"] = s.time_ns;
  out["core_busy_cycles"] = s.core_busy_cycles;
  out["matrix_utilization"] = s.matrix_utilization;
  out["vector_utilization"] = s.vector_utilization;
  out["core_utilization"] = s.core_utilization;
  out["dma_bytes"] = s.dma_bytes;
  out["ring_bytes"] = s.ring_bytes;
  out["instructions"] = s.instructions;
  return out;
}

double device_elapsed_ms(int64_t start_id, int64_t end_id) {
  const rt::Event& start = glue::event_of_id(start_id, "device_elapsed_time");
  const rt::Event& end = glue::event_of_id(end_id, "device_elapsed_time");
  return glue::call_runtime([&] { return end.device_elapsed_ms_since(start); });
}

double host_elapsed_ms(int64_t start_id, int64_t end_id) {
  const rt::Event& start = glue::event_of_id(start_id, "elapsed_time");
  const rt::Event& end = glue::event_of_id(end_id, "elapsed_time");
  return glue::call_runtime([&] { return end.elapsed_ms_since(start); });
}

glue::DeviceLayout default_layout(std::vector<int64_t> sizes,
                                  at::ScalarType dtype, int64_t stick_dim) {
  glue::check_supported_dtype(dtype);
  return glue::make_default_layout(sizes, c10::elementSize(dtype), stick_dim);
}

glue::DeviceLayout custom_layout(std::vector<int64_t> sizes,
                                 at::ScalarType dtype,
                                 std::vector<int64_t> device_size,
                                 std::vector<int64_t> dim_map,
                                 std::vector<int64_t> dim_step) {
  glue::check_supported_dtype(dtype);
  return glue::make_layout(std::move(sizes), c10::elementSize(dtype),
                           std::move(device_size), std::move(dim_map),
                           std::move(dim_step));
}

void bind_layout(py::module_& m) {
  py::class_<glue::DeviceLayout>(m, "DeviceLayout")
      .def_readonly("host_size", &glue::DeviceLayout::host_sizes)
      .def_readonly("element_size", &glue::DeviceLayout::element_size)
      .def_readonly("device_size", &glue::DeviceLayout::device_size)
      .def_readonly("dim_map", &glue::DeviceLayout::dim_map)
      .def_readonly("dim_step", &glue::DeviceLayout::dim_step)
      .def_readonly("stride_map", &glue::DeviceLayout::stride_map)
      .def_property_readonly("device_bytes", &glue::DeviceLayout::device_bytes)
      .def_property_readonly("elements_per_stick",
                             &glue::DeviceLayout::elements_per_stick)
      .def("__eq__",
           [](const glue::DeviceLayout& a, const glue::DeviceLayout& b) {
             return a.same_placement(b);
           })
      .def("__repr__", &glue::DeviceLayout::to_string);
  m.def("default_layout", &default_layout, py::arg("size"), py::arg("dtype"),
        py::arg("stick_dim") = -1);
  m.def("custom_layout", &custom_layout, py::arg("size"), py::arg("dtype"),
        py::arg("device_size"), py::arg("dim_map"), py::arg("dim_step"));
  m.def("tensor_layout",
        [](const at::Tensor& t) { return glue::tensor_layout(t); });
  m.def("to_device", &glue::to_device_with_layout, py::arg("tensor"),
        py::arg("device"), py::arg("layout"));
  m.def("empty_with_layout", &glue::empty_with_layout, py::arg("size"),
        py::arg("dtype"), py::arg("device"), py::arg("layout"));
}

void bind_device(py::module_& m) {
  m.def("_init", [] { glue::runtime(); });
  m.def("device_count", [] { return glue::device_count(); });
  m.def("backend_name", [] { return glue::runtime().backend_name(); });
  m.def("current_device", [] { return glue::current_device(); });
  m.def("set_device", [](c10::DeviceIndex i) { glue::set_current_device(i); });
  m.def("is_initialized",
        [](c10::DeviceIndex i) { return glue::device_initialized(i); });
  m.def("_is_in_bad_fork", [] { return glue::in_bad_fork(); });
  m.def(
      "synchronize",
      [](c10::DeviceIndex i) {
        i = glue::resolve_device_index(i);
        glue::call_runtime(
            [&] { glue::runtime().synchronize(i, glue::interrupt_check()); });
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("device_properties", &device_properties);
  m.def("last_launch_stats", &last_launch_stats);
  m.def("device_elapsed_ms", &device_elapsed_ms);
  m.def("host_elapsed_ms", &host_elapsed_ms);
  m.def("default_generator", [](c10::DeviceIndex i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(glue::default_generator(i)));
  });
}

void bind_memory(py::module_& m) {
  m.def("allocator_stats", &allocator_stats);
  m.def("empty_cache", [] { glue::device_allocator()->emptyCache({0, 0}); });
  m.def("mem_get_info", [](c10::DeviceIndex i) {
    return glue::device_allocator()->getMemoryInfo(
        glue::resolve_device_index(i));
  });
  m.def("pinned_bytes_in_use",
        [] { return glue::PinnedHostMemory::get().bytes_in_use(); });
  m.def("is_pinned_ptr", [](uintptr_t ptr) {
    return glue::PinnedHostMemory::get().contains(
        reinterpret_cast<const void*>(ptr));
  });
}

void bind_fallback(py::module_& m) {
  m.def("fallback_stats", [] { return glue::fallback_counts(); });
  m.def("reset_fallback_stats", [] { glue::reset_fallback_counts(); });
  m.def("set_strict", [](bool strict) { glue::set_strict_mode(strict); });
  m.def("is_strict", [] { return glue::strict_mode(); });
}

void bind_ops(py::module_& m) {
  m.def("op_stats", [] {
    const glue::ops::OpStats s = glue::ops::op_stats();
    py::dict out;
    out["launches"] = s.launches;
    out["program_hits"] = s.program_hits;
    out["program_misses"] = s.program_misses;
    out["device_materializations"] = s.device_materializations;
    out["host_materializations"] = s.host_materializations;
    out["program_evictions"] = s.program_evictions;
    out["cached_programs"] = s.cached_programs;
    return out;
  });
  m.def("reset_op_stats", [] { glue::ops::reset_op_stats(); });
  m.def("program_cache_capacity",
        [] { return glue::ops::program_cache_capacity(); });
  m.def("set_program_cache_capacity", [](size_t capacity) {
    glue::ops::set_program_cache_capacity(capacity);
  });
  m.def("device_time_stats", [] {
    const glue::ops::DeviceTimeStats s = glue::ops::device_time_stats();
    py::dict out;
    out["total_ns"] = s.launch_ns + s.copy_ns + s.link_ns;
    out["launches"] = s.launches;
    out["launch_ns"] = s.launch_ns;
    out["launch_dma_bytes"] = s.launch_dma_bytes;
    out["copies"] = s.copies;
    out["copy_ns"] = s.copy_ns;
    out["copy_bytes"] = s.copy_bytes;
    out["link_transfers"] = s.link_transfers;
    out["link_ns"] = s.link_ns;
    out["link_bytes"] = s.link_bytes;
    return out;
  });
  m.def("reset_device_time_stats",
        [] { glue::ops::reset_device_time_stats(); });
}

}  // namespace

namespace {

// Runs a pending Ctrl-C's handler from a wait (the interpreter only runs it
// between bytecodes, and the waiting thread is inside a call): the default
// handler raises KeyboardInterrupt, which ends the wait. Other threads have
// no signals to run.
void raise_pending_signals() {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_spyre native glue";
  glue::set_interrupt_check(&raise_pending_signals);
  // The program format's stick (every device's unit of transfer and layout).
  m.attr("STICK_BYTES") = rt::kStickBytes;
  py::register_exception_translator(&translate_exceptions);
  bind_device(m);
  bind_memory(m);
  bind_layout(m);
  bind_fallback(m);
  glue::bind_programs(m);
  glue::distributed::bind_distributed(m);
  bind_ops(m);
}
