"""ModuleInfo suite: a chosen set of torch.nn modules, forward on spyre
against the same module (same weights) on CPU, in eval mode.

The set is the config's `global.supported_modules`, or DEFAULT_MODULES when
no config names one: the building blocks of the transformer models the
project targets.
"""

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import TrainEvalMode, module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.utils._pytree import tree_map

from torch_spyre.testing import records
from torch_spyre.testing.device_type import _module_path, active_config, install

install()

DEVICE_DTYPES = (torch.float16, torch.float32)
DEFAULT_MODULES = ("torch.nn.Linear", "torch.nn.LayerNorm", "torch.nn.RMSNorm",
                   "torch.nn.Embedding", "torch.nn.ReLU", "torch.nn.GELU", "torch.nn.SiLU",
                   "torch.nn.Softmax", "torch.nn.Tanh", "torch.nn.Sigmoid")


def chosen_modules():
    config = active_config()
    wanted = (config.global_.supported_modules if config is not None
              and config.global_.supported_modules is not None else DEFAULT_MODULES)
    unknown = set(wanted) - {_module_path(m) for m in module_db}
    if unknown:
        raise ValueError(f"no ModuleInfo in module_db for {sorted(unknown)}; "
                         "check global.supported_modules in the relay config")
    return [m for m in module_db if _module_path(m) in wanted]


def _move(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


class TestSpyreModules(TestCase):
    @modules(chosen_modules(), allowed_dtypes=DEVICE_DTYPES,
             train_eval_mode=TrainEvalMode.eval_only)
    def test_forward(self, device, dtype, module_info, training):
        inputs = module_info.module_inputs_func(module_info, device="cpu", dtype=dtype,
                                                requires_grad=False, training=training)
        ran = 0
        for index, module_input in enumerate(inputs):
            if module_input.forward_input is None:
                continue
            c_args, c_kwargs = (module_input.constructor_input.args,
                                module_input.constructor_input.kwargs)
            f_args, f_kwargs = (module_input.forward_input.args,
                                module_input.forward_input.kwargs)
            torch.manual_seed(index)
            cpu_module = module_info.module_cls(*c_args, **c_kwargs).to(dtype).train(training)
            device_module = copy.deepcopy(cpu_module).to(device)
            expected = cpu_module(*f_args, **f_kwargs)
            actual = device_module(*tree_map(lambda t: _move(t, device), f_args),
                                   **tree_map(lambda t: _move(t, device), f_kwargs))
            self.assertEqual(tree_map(lambda t: _move(t, "cpu"), actual), expected,
                             exact_device=False,
                             msg=lambda m: f"input {index} ({module_input.desc}): {m}")
            records.count("samples")
            ran += 1
        if not ran:
            self.skipTest(f"{module_info.name} has no forward inputs for {dtype}")


instantiate_device_type_tests(TestSpyreModules, globals(), only_for="privateuse1")

if __name__ == "__main__":
    run_tests()
