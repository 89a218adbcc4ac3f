"""Which OpInfos run natively on spyre, decided at run time.

An op is native when one of its ATen overloads has a kernel registered for
PrivateUse1 (the boxed CPU fallback registered for every op does not count:
`_dispatch_has_kernel_for_dispatch_key` sees only real kernels). An op whose
ATen entry is CompositeImplicitAutograd has no kernel of its own; it is
native when its first sample runs on spyre in strict mode, i.e. its
decomposition reaches native kernels only. The set grows as eager kernels
land, with no list to maintain here.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

DISPATCH_KEY = "PrivateUse1"


@dataclasses.dataclass(frozen=True)
class NativeOp:
    name: str        # OpInfo.name
    full_name: str   # OpInfo.full_name (name.variant_test_name)
    why: str         # the kernel found, or how the decomposition was checked


def aten_packet(opinfo):
    """The torch.ops.aten packet an OpInfo calls, or None."""
    for candidate in (opinfo.aten_name, opinfo.name.split(".")[-1]):
        packet = getattr(torch.ops.aten, candidate or "", None)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            return packet
    return None


def _qualified(packet, overload):
    base = packet._qualified_op_name
    return base if overload == "default" else f"{base}.{overload}"


def _has_kernel(name, key):
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    except RuntimeError:  # a TorchScript-only overload (e.g. aten::acos.int)
        return False


def native_kernel(packet):
    """The first overload of `packet` with a PrivateUse1 kernel, or None."""
    for overload in packet.overloads():
        name = _qualified(packet, overload)
        if _has_kernel(name, DISPATCH_KEY):
            return name
    return None


def _is_composite_implicit(packet):
    return any(_has_kernel(_qualified(packet, o), "CompositeImplicitAutograd")
               for o in packet.overloads())


def _runs_without_fallback(opinfo):
    """Runs the op's first floating sample on spyre with CPU fallback forbidden."""
    dtype = next((d for d in (torch.float32, torch.float16)
                  if d in opinfo.supported_dtypes("cpu")), None)
    if dtype is None:
        return False
    sample = next(iter(opinfo.sample_inputs("cpu", dtype)), None)
    if sample is None:
        return False
    on_device = sample.transform(
        lambda t: t.to("spyre") if isinstance(t, torch.Tensor) else t)
    try:
        with torch.spyre.strict():
            opinfo(on_device.input, *on_device.args, **on_device.kwargs)
        torch.spyre.synchronize()
    except Exception:  # a fallback (strict error) or any failure: not native
        return False
    return True


def classify(opinfo):
    """A NativeOp when `opinfo` runs natively on spyre, else None."""
    packet = aten_packet(opinfo)
    if packet is None:
        return None
    kernel = native_kernel(packet)
    if kernel is not None:
        return NativeOp(opinfo.name, opinfo.full_name, f"{DISPATCH_KEY} kernel for {kernel}")
    if _is_composite_implicit(packet) and _runs_without_fallback(opinfo):
        return NativeOp(opinfo.name, opinfo.full_name,
                        f"{packet._qualified_op_name} is CompositeImplicitAutograd; its "
                        "first sample ran in strict mode (no CPU fallback)")
    return None


@functools.lru_cache(maxsize=1)
def native_opinfos():
    """[(OpInfo, NativeOp)] over op_db, computed once per process."""
    from torch.testing._internal.common_methods_invocations import op_db
    found = []
    for opinfo in op_db:
        native = classify(opinfo)
        if native is not None:
            found.append((opinfo, native))
    return tuple(found)


def native_op_names():
    """Names and full names of every native OpInfo (for config lookups)."""
    return frozenset(n for _, op in native_opinfos() for n in (op.name, op.full_name))
