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


# A JSON file caching the discovery across processes (relay shards, the
# restarts after a crash): `python -m torch_spyre.testing run` points it at
# cache_file(); its name carries the key, and the file repeats it.
CACHE_ENV = "SPYRE_RELAY_NATIVE_OPS_CACHE"
CACHE_SCHEMA = "torch_spyre.relay.native_ops/1"


def extension_fingerprint():
    """sha256 of the compiled extension: a rebuild can register new kernels."""
    import glob
    import hashlib
    import os

    import torch_spyre
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(os.path.dirname(torch_spyre.__file__), "_C*.so"))):
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def cache_key(config_sha256):
    """The key of a discovery: torch version, the relay config's sha256 and
    the extension build (any of them changing invalidates the cache)."""
    import hashlib
    text = "\n".join((torch.__version__, config_sha256 or "", extension_fingerprint()))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def cache_file(cache_dir, config_sha256):
    import os
    return os.path.join(cache_dir, f"native-ops-{cache_key(config_sha256)}.json")


def _discover():
    from torch.testing._internal.common_methods_invocations import op_db
    found = []
    for opinfo in op_db:
        native = classify(opinfo)
        if native is not None:
            found.append((opinfo, native))
    return tuple(found)


def _load_cache(path):
    """The cached discovery, or None when the file is absent, of another
    torch version, or names an OpInfo op_db no longer has."""
    import json
    from torch.testing._internal.common_methods_invocations import op_db
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("schema") != CACHE_SCHEMA or data.get("torch_version") != torch.__version__:
        return None
    by_name = {op.full_name: op for op in op_db}
    found = []
    for entry in data.get("ops", []):
        opinfo = by_name.get(entry.get("full_name"))
        if opinfo is None:
            return None
        found.append((opinfo, NativeOp(opinfo.name, opinfo.full_name, entry["why"])))
    return tuple(found)


def _store_cache(path, found):
    import json
    import os
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    data = {"schema": CACHE_SCHEMA, "torch_version": torch.__version__,
            "ops": [{"full_name": n.full_name, "why": n.why} for _, n in found]}
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(temporary, path)  # atomic: concurrent shards never read half a file


@functools.lru_cache(maxsize=1)
def native_opinfos():
    """[(OpInfo, NativeOp)] over op_db, computed once per process, and once
    across processes when $SPYRE_RELAY_NATIVE_OPS_CACHE names a cache file."""
    import os
    path = os.environ.get(CACHE_ENV)
    if path:
        cached = _load_cache(path)
        if cached is not None:
            return cached
    found = _discover()
    if path:
        _store_cache(path, found)
    return found


def native_op_names():
    """Names and full names of every native OpInfo (for config lookups)."""
    return frozenset(n for _, op in native_opinfos() for n in (op.name, op.full_name))
