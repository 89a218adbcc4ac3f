"""The `spyre` device-type test base for instantiate_device_type_tests.

`SpyreTestBase` extends torch 2.13's `PrivateUse1TestBase` where it falls
short for a relay:

* its `device_type` is the backend name (`spyre`) from the start, so the
  instantiated class names (TestFooSPYRE), `NATIVE_DEVICES` checks and
  OpInfo dtype lookups do not depend on whether setUpClass already ran;
* with a relay config active it drops the variants the config excludes
  (ops outside `global.supported_ops`, dtypes outside the supported ones,
  `edits` include/exclude), so they are never generated;
* it tags every variant with its op, dtype and module so the pytest plugin
  can apply modes and report per op;
* it applies the config's per-(op, dtype) tolerances through the same
  precision/rel_tol mechanism upstream tests already use.

`install()` puts it in place of the stock base in common_device_type's list
of test bases (the list PyTorch's TORCH_TEST_DEVICES hook extends); the
relay's pytest plugin calls it before any test module is imported.
"""

from __future__ import annotations

import inspect
import sys

import torch
import torch_spyre  # noqa: F401  (registers the spyre device)
from torch.testing._internal import common_device_type as cdt

_active_config = None
# (file, class, test) of variants the config removed; reported, not run.
removed_variants: list[tuple[str, str, str, str]] = []


def set_active_config(config):
    """Makes `config` (a RelayConfig or None) govern instantiation."""
    global _active_config
    _active_config = config


def active_config():
    return _active_config


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else None


def _module_path(module_info):
    return f"torch.{module_info.name}" if module_info.name.startswith("nn.") else module_info.name


def _dtype_names(value):
    """The dtype names in one parameter value: a dtype, or a list/tuple of
    dtypes (as @dtypes((a, b), ...) gives); [] for anything else."""
    if isinstance(value, torch.dtype):
        return [_dtype_name(value)]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.dtype)
                                                           for v in value):
        return [_dtype_name(v) for v in value]
    return []


def variant_info(param_kwargs):
    """{op, dtype, dtypes, module} of one instantiated variant.

    `dtype` is the variant's dtype: the `dtype` parameter, or for a variant
    of several dtypes at once (@dtypes((torch.float32, torch.complex64)),
    passed as `dtypes`) their names joined by ",". `dtypes` lists every
    dtype the variant is instantiated for: those plus any dtype-valued
    parameter (e.g. @parametrize("other", [torch.int64])), in order. None /
    [] where absent.
    """
    op = param_kwargs.get("op")
    module_info = param_kwargs.get("module_info")
    own = _dtype_names(param_kwargs.get("dtypes", param_kwargs.get("dtype")))
    every = list(own)
    for key, value in param_kwargs.items():
        if key not in ("dtype", "dtypes", "device", "devices"):
            every += _dtype_names(value)
    return {
        "op": None if op is None else {"name": op.name, "full_name": op.full_name,
                                       "aten_name": op.aten_name},
        "dtype": ",".join(own) if own else None,
        "dtypes": list(dict.fromkeys(every)),
        "module": None if module_info is None else _module_path(module_info),
    }


class SpyreTestBase(cdt.PrivateUse1TestBase):
    device_type = torch._C._get_privateuse1_backend_name()

    @classmethod
    def instantiate_test(cls, name, test, *, generic_cls=None):
        before = set(cls.__dict__)
        super().instantiate_test(name, test, generic_cls=generic_cls)
        source = _source_file(generic_cls)
        config = _active_config
        native = _native_names() if config is not None and config.global_.discover_native_ops else ()
        for test_name in sorted(set(cls.__dict__) - before):
            fn = cls.__dict__[test_name]
            info = variant_info(_param_kwargs(fn))
            class_name = generic_cls.__name__ if generic_cls is not None else cls.__name__
            if config is not None:
                why = config.variant_excluded(source, class_name, test_name, op=info["op"],
                                              dtypes=info["dtypes"], module=info["module"],
                                              native_ops=native)
                if why is not None:
                    delattr(cls, test_name)
                    removed_variants.append((source, class_name, test_name, why))
                    continue
            setattr(cls, test_name, _with_config_tolerance(fn, info, source, class_name,
                                                           test_name))

    def _get_tolerance_override(self, test, dtype):
        # The config's per-(op, dtype) precision is the device's statement
        # about its numerics, so it wins over the test's own override.
        precision = getattr(self, "_relay_precision", None)
        atol, rtol = super()._get_tolerance_override(test, dtype)
        if precision is None:
            return atol, rtol
        return (precision.atol if precision.atol is not None else atol,
                precision.rtol if precision.rtol is not None else rtol)


def _param_kwargs(fn):
    # instantiate_test_helper binds each variant's kwargs as the default of
    # `param_kwargs`; reading it avoids re-deriving names from suffixes.
    param = inspect.signature(fn, follow_wrapped=False).parameters.get("param_kwargs")
    return param.default if param is not None and isinstance(param.default, dict) else {}


def _with_config_tolerance(fn, info, source, class_name, test_name):
    def variant(self):
        config = _active_config
        policy = None if config is None else config.policy(
            source, class_name, test_name, op=info["op"], dtype=info["dtype"])
        self._relay_precision = None if policy is None else policy.precision
        try:
            return fn(self)
        finally:
            self._relay_precision = None

    variant.__name__ = variant.__qualname__ = test_name
    variant.__dict__.update(fn.__dict__)  # keeps unittest/pytest marks of the test
    variant.__wrapped__ = fn
    variant.relay_variant = info
    return variant


def _source_file(generic_cls):
    module = sys.modules.get(getattr(generic_cls, "__module__", ""), None)
    return getattr(module, "__file__", None) or "<unknown>"


def _native_names():
    from .native_ops import native_op_names
    return native_op_names()


def install():
    """Replaces the stock PrivateUse1 base with SpyreTestBase (idempotent).

    instantiate_device_type_tests reads common_device_type's module-level
    list of bases; PyTorch's own TORCH_TEST_DEVICES hook appends to it, and
    appending alone would give two privateuse1 bases and clashing classes.
    """
    bases = cdt.device_type_test_bases
    bases[:] = [b for b in bases if b is not cdt.PrivateUse1TestBase]
    if SpyreTestBase not in bases:
        bases.append(SpyreTestBase)
    return SpyreTestBase
