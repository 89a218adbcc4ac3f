"""Fixture in the style of PyTorch's device-generic tests: variants
instantiated for several dtypes at once (@dtypes pairs, a dtype-valued
@parametrize next to @dtypes, @dtypesIfPRIVATEUSE1, an OpInfo whose dtypes
come from its dtypesIf table). The relay's dtype filter must see every dtype
of a variant. Run through the relay (PYTORCH_ROOT=test/relay/upstream)."""

import torch
from torch.testing._internal.common_device_type import (
    dtypes, dtypesIfPRIVATEUSE1, instantiate_device_type_tests, ops)
from torch.testing._internal.common_dtype import _dispatch_dtypes, floating_types_and
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests
from torch.testing._internal.opinfo.core import OpInfo, SampleInput


def _samples(op_info, device, dtype, requires_grad, **kwargs):
    yield SampleInput(torch.ones(4, device=device, dtype=dtype))


# dtypes on the CPU: four floating types; on spyre (its dtypesIf entry) two.
FIXTURE_OP = OpInfo("fixture_neg", op=torch.neg,
                    dtypes=floating_types_and(torch.float16, torch.bfloat16),
                    dtypesIf={"spyre": _dispatch_dtypes((torch.float16, torch.float64))},
                    sample_inputs_func=_samples)


class TestMultiDtype(TestCase):
    @dtypes((torch.float32, torch.complex64), (torch.float16, torch.float32),
            (torch.float32, torch.float64))
    def test_pair(self, device, dtypes):
        a = torch.ones(2, device=device, dtype=dtypes[0])
        self.assertEqual(a.cpu().to(dtypes[1]), torch.ones(2, dtype=dtypes[1]))

    @dtypes(torch.float16, torch.float32)
    @parametrize("other", [torch.float32, torch.int64])
    def test_with_other(self, device, dtype, other):
        self.assertEqual(torch.ones(2, device=device, dtype=dtype).cpu().to(other),
                         torch.ones(2, dtype=other))

    @dtypes(torch.float16, torch.float32, torch.float64)
    @dtypesIfPRIVATEUSE1(torch.float32, torch.bfloat16)
    def test_if_device(self, device, dtype):
        self.assertEqual(torch.zeros(2, device=device, dtype=dtype).cpu(),
                         torch.zeros(2, dtype=dtype))

    @ops([FIXTURE_OP])
    def test_op(self, device, dtype, op):
        sample = next(iter(op.sample_inputs("cpu", dtype)))
        self.assertEqual(op(sample.input.to(device)).cpu(), op(sample.input))


instantiate_device_type_tests(TestMultiDtype, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
