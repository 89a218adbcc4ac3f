"""torch.spyre: the device module of the spyre backend (modelled on torch.cuda)."""

import contextlib
import threading

import torch

from . import _C

OutOfMemoryError = torch.OutOfMemoryError

_BACKEND = "spyre"


def _index(device=None, optional=True):
    """An int device index from None / int / str / torch.device."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != _BACKEND:
            raise ValueError(f"torch.spyre: expected a spyre device, got {device}")
        index = _C.current_device() if device.index is None else device.index
    count = _C.device_count()
    if not 0 <= index < count:
        # RuntimeError, as torch.cuda raises for an invalid device ordinal.
        raise RuntimeError(
            f"torch.spyre: device index {index} is out of range; this process has "
            f"{count} spyre device(s) (the sim backend reads the number from SPYRE_SIM_DEVICES)")
    return index


# --- devices -----------------------------------------------------------------

def is_available():
    return _C.device_count() > 0


def device_count():
    return _C.device_count()


def is_initialized():
    # As torch.cuda: a forked child of a process that used the device has
    # no usable device, whatever it inherited.
    return not _is_in_bad_fork() and any(
        _C.is_initialized(i) for i in range(_C.device_count()))


def _is_in_bad_fork():
    """True in a child forked after this process used a spyre device; the
    device cannot be used there (use the 'spawn' start method)."""
    return _C._is_in_bad_fork()


def init():
    _C._init()


def current_device():
    return _C.current_device()


def set_device(device):
    _C.set_device(_index(device))


class device:
    """Context manager that makes ``device`` current (per thread)."""

    def __init__(self, device):
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = _C.current_device()
        if self.index >= 0:
            _C.set_device(self.index)
        return self

    def __exit__(self, *exc):
        _C.set_device(self.previous)
        return False


def synchronize(device=None):
    _C.synchronize(_index(device))


def get_device_properties(device=None):
    return _DeviceProperties(_C.device_properties(_index(device)))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    """What the device supports, as torch.accelerator.get_device_capability
    reports it: ``{"supported_dtypes": set of torch.dtype}``, the dtypes a
    spyre tensor can hold (compute runs in float16, bfloat16, float32 and
    int8; the others are stored and computed through the CPU fallback)."""
    return torch._C._accelerator_getDeviceCapability(_index(device))


# --- autocast ---------------------------------------------------------------------

def get_amp_supported_dtype():
    """The dtypes torch.autocast("spyre", dtype=...) accepts: the device's
    lower-precision compute types."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation=True):
    return True


class _DeviceProperties:
    """name, backend, num_cores, scratchpad_bytes, scratchpad_reserve,
    stick_bytes, total_memory, clock_ghz, timing_table_version: the chip
    facts the kernel builders and the compiler plan for; launch_overhead_ns
    (the modelled fixed cost of a launch), card_link_gb_per_s and
    card_link_latency_ns (the modelled card-to-card link: peer copies,
    collectives)."""

    def __init__(self, values):
        self.__dict__.update(values)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"_SpyreDeviceProperties({fields})"


def last_launch_stats(device=None):
    """Modelled figures of the device's most recent launch: cycles, time_ns,
    per-core busy cycles, utilisations, DMA and ring bytes."""
    return _C.last_launch_stats(_index(device))


# --- streams and events ----------------------------------------------------------

class Stream(torch.Stream):
    """A spyre stream: an in-order queue of device work."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device(_BACKEND, _index(device)),
                               priority=priority)

    def __enter__(self):
        self._context = stream(self)
        return self._context.__enter__()

    def __exit__(self, *exc):
        return self._context.__exit__(*exc)


class Event(torch.Event):
    """A spyre event; ``elapsed_time`` gives host milliseconds and
    ``device_elapsed_time`` the modelled device milliseconds."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return super().__new__(cls, device=torch.device(_BACKEND, _C.current_device()),
                               enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)

    def elapsed_time(self, end_event):
        # torch.Event.elapsed_time accepts only exact torch.Event arguments.
        return _C.host_elapsed_ms(self.event_id, end_event.event_id)

    def device_elapsed_time(self, end_event):
        return _C.device_elapsed_ms(self.event_id, end_event.event_id)


def _wrap(base):
    return Stream(stream_id=base.stream_id, device_index=base.device_index,
                  device_type=base.device_type)


def current_stream(device=None):
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None):
    base = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=base.device_index, device_type=base.device_type)


def set_stream(s):
    torch.accelerator.set_stream(s)


class stream(contextlib.AbstractContextManager):
    """Makes ``s`` the current stream (and its device the current device)."""

    def __init__(self, s):
        self.stream = s
        self._saved = threading.local()

    def __enter__(self):
        if self.stream is None:
            return None
        self._saved.device = _C.current_device()
        self._saved.stream = torch.accelerator.current_stream(self.stream.device_index)
        _C.set_device(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        torch.accelerator.set_stream(self._saved.stream)
        _C.set_device(self._saved.device)
        return False


# --- memory --------------------------------------------------------------------

def memory_stats(device=None):
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None):
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None):
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None):
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None):
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None):
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    _C.empty_cache()


def mem_get_info(device=None):
    """(free bytes, total bytes) of the device."""
    return tuple(_C.mem_get_info(_index(device)))


def allocator_stats(device=None):
    """The runtime caching allocator's own figures (incl. fragmentation)."""
    return _C.allocator_stats(_index(device))


# --- random numbers ----------------------------------------------------------------

def default_generator(device=None):
    return _C.default_generator(_index(device))


def manual_seed(seed):
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(_C.device_count()):
        _C.default_generator(i).manual_seed(int(seed))


def seed():
    return default_generator().seed()


def initial_seed():
    return default_generator().initial_seed()


def get_rng_state(device=None):
    return default_generator(device).get_state()


def set_rng_state(state, device=None):
    default_generator(device).set_state(state)


# --- CPU fallback ------------------------------------------------------------------

def fallback_stats():
    """{operator name: number of CPU fallbacks} since the last reset."""
    return dict(_C.fallback_stats())


def reset_fallback_stats():
    _C.reset_fallback_stats()


def set_strict(strict=True):
    """Strict mode makes every CPU fallback an error (also SPYRE_STRICT=1)."""
    _C.set_strict(bool(strict))


def is_strict():
    return _C.is_strict()


# --- eager kernels -------------------------------------------------------------

def op_stats():
    """Counters of the eager-kernel launch path since the last reset:
    launches, program cache hits and misses (programs built and loaded),
    views copied to a fresh layout on the device or through the host,
    programs evicted from the bounded cache, and (not reset) the programs it
    holds now."""
    return dict(_C.op_stats())


def reset_op_stats():
    _C.reset_op_stats()


def program_cache_capacity():
    """Programs per device the bounded eager program cache keeps (least
    recently used evicted); SPYRE_PROGRAM_CACHE_SIZE sets it at start."""
    return _C.program_cache_capacity()


def set_program_cache_capacity(capacity):
    """Changes the bounded cache's capacity (evicting down to it)."""
    _C.set_program_cache_capacity(int(capacity))


def device_time_stats():
    """Modelled device time since the last reset, summed over devices:
    total_ns (launch_ns + copy_ns + link_ns), launches and their DMA bytes,
    copies (host<->device, device<->device) and their device bytes, and
    card-to-card link transfers (peer copies between cards, collectives) and
    their bytes. Work counts once it ran, so call synchronize() before
    reading."""
    return dict(_C.device_time_stats())


def reset_device_time_stats():
    _C.reset_device_time_stats()


@contextlib.contextmanager
def strict(enabled=True):
    previous = _C.is_strict()
    _C.set_strict(enabled)
    try:
        yield
    finally:
        _C.set_strict(previous)


_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def __getattr__(name):
    # Inductor looks these up on the device module the first time it compiles
    # for spyre (torch._inductor.codegen.common.init_backend_registration).
    # That lookup is our cue to register the compiler, which is imported then
    # and never at `import torch`. torch_spyre registers the device itself
    # (with its post-grad pass, which Inductor's own registration from these
    # attributes would drop), so the attributes stay absent and Inductor
    # skips its registration.
    if name in _INDUCTOR_HOOKS:
        from torch_spyre import _inductor
        _inductor.register()
    raise AttributeError(f"module 'torch.spyre' has no attribute {name!r}")
