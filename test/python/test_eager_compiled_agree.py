"""Eager ops and their compiled form are built by the same kernel library
(kernels/: build_loop_kernel); where the eager op describes its program as
the compiler describes the op's graph, the two agree bit for bit. Aligned
and ragged shapes, fp16/bf16/fp32."""

import pytest
import torch
import torch.nn.functional as F

from ops_testing import FLOATS, rand

SHAPES = [(256, 1024), (100, 300), (3, 7, 90)]


def _compiled(fn, *args):
    torch._dynamo.reset()
    with torch.spyre.strict():
        return torch.compile(fn, backend="spyre")(*args)


def _eager(fn, *args):
    with torch.spyre.strict():
        return fn(*args)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_bit_for_bit(dtype, shape):
    n = shape[-1]
    x, w, b = (rand(s, dtype).to("spyre") for s in (shape, (n,), (n,)))
    for fn, args in ((lambda x: F.layer_norm(x, (n,)), (x,)),
                     (lambda x, w, b: F.layer_norm(x, (n,), w, b), (x, w, b))):
        eager, compiled = _eager(fn, *args), _compiled(fn, *args)
        assert torch.equal(eager.cpu(), compiled.cpu())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_without_weight_bit_for_bit(dtype, shape):
    # (with a weight, PyTorch's decomposition the compiler sees rounds before
    # the weight, where the CPU's and spyre's eager kernels round once)
    n = shape[-1]
    x = rand(shape, dtype).to("spyre")
    fn = lambda x: F.rms_norm(x, (n,), eps=1e-6)  # noqa: E731
    assert torch.equal(_eager(fn, x).cpu(), _compiled(fn, x).cpu())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_bit_for_bit(dtype, shape, log):
    x = (rand(shape, dtype) * 3).to("spyre")
    fn = (lambda x: F.log_softmax(x, -1)) if log else (lambda x: F.softmax(x, -1))
    assert torch.equal(_eager(fn, x).cpu(), _compiled(fn, x).cpu())


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_is_the_cpus(dtype):
    # exp(x - max) * (1 / sum), as PyTorch's CPU kernel: fp32 results within
    # 8 ulps of the CPU's (exp within an ulp on either side, then the sum),
    # 16-bit results within one ulp of the CPU's fp32 math rounded
    a = rand((33, 130), dtype, torch.Generator().manual_seed(0)) * 3
    want = F.softmax(a.float(), -1).to(dtype)
    for got in (_eager(lambda x: F.softmax(x, -1), a.to("spyre")),
                _compiled(lambda x: F.softmax(x, -1), a.to("spyre"))):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-6 if dtype == torch.float32
                                   else 0, atol=0 if dtype == torch.float32 else
                                   torch.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_row_reductions_bit_for_bit(dtype, shape):
    x = rand(shape, dtype).to("spyre")
    for fn in (lambda x: x.sum(-1), lambda x: x.amax(-1), lambda x: x.amin(-1),
               lambda x: x.mean(-1), lambda x: x.sum(-1, keepdim=True)):
        assert torch.equal(_eager(fn, x).cpu(), _compiled(fn, x).cpu())


POINTWISE = {
    "exp": torch.exp, "sin": torch.sin, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "gelu": F.gelu, "silu": F.silu, "relu": F.relu, "abs": torch.abs, "neg": torch.neg,
    "reciprocal": torch.reciprocal, "erf": torch.erf,
    "clamp": lambda x: x.clamp(-0.5, 0.5), "sqrt": torch.sqrt,
    "expm1": torch.expm1, "log1p": torch.log1p,
    "add": lambda x: x + 1.5, "mul": lambda x: x * 0.75,
    "add_alpha": lambda x: torch.add(x, x, alpha=0.5), "maximum": lambda x: torch.maximum(x, x * 0.5),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(37, 130), (256, 64)])
def test_single_pointwise_ops_bit_for_bit(dtype, shape):
    # one op computed in fp32 and rounded once on both paths (a chain of eager
    # ops rounds after each op, as the CPU does; compiled chains round once)
    x = (rand(shape, dtype) * 2).to("spyre")
    positive = x.abs()
    for name, fn in POINTWISE.items():
        arg = positive if name in ("sqrt", "reciprocal", "log1p") else x
        assert torch.equal(_eager(fn, arg).cpu(), _compiled(fn, arg).cpu()), name


@pytest.mark.parametrize("fn", [torch.expm1, torch.log1p])
def test_compiled_expm1_log1p_keep_their_precision_near_zero(fn):
    # exp(x) - 1 and log(1 + x) lose every digit for |x| ~ 1e-6; both paths
    # use Goldberg's rewrites: relative error of a few fp32 ulps
    a = torch.tensor([1e-7, -3e-6, 2e-5, 1e-3, 0.5, -0.25, 0.0, 3.0, float("inf")])
    got = _compiled(fn, a.to("spyre")).cpu()
    torch.testing.assert_close(got, fn(a), rtol=1e-6, atol=0)


SPECIAL = [float("nan"), float("inf"), float("-inf"), 1.0, -1.0, 0.0, -0.0, 1.5, -1.5]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", [torch.acos, torch.erfinv], ids=["acos", "erfinv"])
def test_formula_functions_bit_for_bit_and_the_cpus(dtype, fn):
    # chains of vector ops written once (kernels/formulas.h): the eager op
    # and the compiled graph expand the same chain; NaN outside [-1, 1] and
    # erfinv's infinities at +-1 as on the CPU
    x = torch.cat([torch.rand(100, 300) * 2 - 1, torch.tensor(SPECIAL).expand(100, -1)], 1)
    x = x.to(dtype)
    on_device = x.to("spyre")
    eager, compiled = _eager(fn, on_device).cpu(), _compiled(fn, on_device).cpu()
    assert torch.equal(eager.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       compiled.view(torch.int16 if dtype != torch.float32 else torch.int32))
    # fp32 within a few ulps; a 16-bit result may round the other way (one
    # ulp of the dtype: assert_close's defaults for it)
    tolerance = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(eager, fn(x.float()).to(dtype), equal_nan=True, **tolerance)
