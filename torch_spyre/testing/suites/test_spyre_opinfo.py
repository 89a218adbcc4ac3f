"""OpInfo suite: every op with a native spyre kernel, against CPU.

The op list is computed when this file is collected (native_ops), so it
grows as eager kernels land. Three tests per (op, dtype):

* test_forward:       each sample input, spyre result vs CPU result;
* test_noncontiguous: the same samples made noncontiguous on the device;
* test_out:           out= into a spyre tensor, for ops that support out=.

Tolerances are assertEqual's per-dtype defaults unless the relay config
gives a per-(op, dtype) precision.
"""

import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.utils._pytree import tree_map

from torch_spyre.testing import records
from torch_spyre.testing.device_type import install
from torch_spyre.testing.native_ops import native_opinfos

install()

# The dtypes the device computes in; the config may narrow them further.
DEVICE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
NATIVE_OPS = [opinfo for opinfo, _ in native_opinfos()]
NATIVE_OPS_WITH_OUT = [op for op in NATIVE_OPS if op.supports_out]


def _to_device(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _on_device(sample, device):
    """`sample` with its tensors on `device`, and a factory's `device=`
    argument too (OpInfo samples are made on the CPU: without this, arange
    and friends would run there)."""
    moved = sample.transform(lambda t: _to_device(t, device))
    if "device" in moved.kwargs:
        moved.kwargs = {**moved.kwargs, "device": device}
    return moved


def _to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


def _run(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


class TestSpyreOpInfo(TestCase):
    def _compare_samples(self, device, dtype, op, make_device_sample):
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
        if not samples:
            self.skipTest(f"{op.full_name} has no sample inputs for {dtype}")
        for index, sample in enumerate(samples):
            expected = _run(op, sample)
            actual = _run(op, make_device_sample(sample, device))
            self.assertEqual(tree_map(_to_cpu, actual), expected, exact_device=False,
                             msg=lambda m: f"sample {index} ({sample.summary()}): {m}")
            records.count("samples")

    @ops(NATIVE_OPS, allowed_dtypes=DEVICE_DTYPES)
    def test_forward(self, device, dtype, op):
        self._compare_samples(device, dtype, op,
                              _on_device)

    @ops(NATIVE_OPS, allowed_dtypes=DEVICE_DTYPES)
    def test_noncontiguous(self, device, dtype, op):
        # Moved first, then made noncontiguous on the device: `.to()` of a
        # noncontiguous CPU tensor would give a dense device tensor.
        self._compare_samples(device, dtype, op,
                              lambda s, d: _on_device(s, d).noncontiguous())

    @ops(NATIVE_OPS_WITH_OUT, allowed_dtypes=DEVICE_DTYPES)
    def test_out(self, device, dtype, op):
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
        if not samples:
            self.skipTest(f"{op.full_name} has no sample inputs for {dtype}")
        for index, sample in enumerate(samples):
            expected = _run(op, sample)
            out = tree_map(lambda t: torch.empty_like(t, device=device)
                           if isinstance(t, torch.Tensor) else t, expected)
            on_device = _on_device(sample, device)
            returned = op(on_device.input, *on_device.args, **on_device.kwargs, out=out)
            self.assertEqual(tree_map(_to_cpu, out), expected, exact_device=False,
                             msg=lambda m: f"sample {index} ({sample.summary()}): {m}")
            self.assertEqual(tree_map(lambda t: t.data_ptr(), returned),
                             tree_map(lambda t: t.data_ptr(), out),
                             msg=f"sample {index}: out= did not return the out tensor")
            records.count("samples")


if not NATIVE_OPS_WITH_OUT:
    del TestSpyreOpInfo.test_out  # @ops rejects an empty op list
if NATIVE_OPS:
    instantiate_device_type_tests(TestSpyreOpInfo, globals(), only_for="privateuse1")
else:
    class TestSpyreOpInfoSPYRE(TestCase):
        def test_no_native_ops(self):
            self.skipTest("no OpInfo op has a native spyre kernel in this build")


if __name__ == "__main__":
    run_tests()
