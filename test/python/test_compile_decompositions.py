"""The spyre decomposition registry and the eager routing of ops the device
lowering cannot handle, both applied to spyre nodes only."""

import torch

from compile_util import compile_and_compare
from torch_spyre._inductor import decompositions

h = torch.float16


def test_registry_holds_the_rewrites():
    assert torch.ops.aten.pow.Tensor_Scalar in decompositions.DECOMPOSITIONS
    assert torch.ops.aten.log2.default in decompositions.DECOMPOSITIONS


def test_pow_cube_is_decomposed_on_spyre():
    before = decompositions.decomposition_counts().get("aten.pow.Tensor_Scalar", 0)
    x = torch.rand(40, 70, dtype=h) + 0.5
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: a.pow(3.0) - a.pow(0.5), x, expect_kernels=1)
    after = decompositions.decomposition_counts().get("aten.pow.Tensor_Scalar", 0)
    assert after - before == 2


def test_log2_log10_sign_tan():
    x = torch.rand(33, 70, dtype=h) + 0.5
    with torch._inductor.config.patch(force_disable_caches=True):
        compile_and_compare(lambda a: torch.log2(a) + torch.log10(a) + torch.sign(a - 1.0)
                            + torch.tan(a * 0.5), x, tol=dict(atol=5e-3, rtol=5e-3))


def test_cpu_graphs_are_not_rewritten():
    before = decompositions.decomposition_counts()
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(lambda a: a.pow(3.0))(torch.rand(8, 8))
    assert decompositions.decomposition_counts() == before
    assert out.shape == (8, 8)


def test_unsupported_op_runs_eagerly_and_is_counted():
    before = decompositions.fallback_counts().get("aten.cumsum.default", 0)
    torch._dynamo.reset()
    x = torch.randn(16, 50, dtype=h)
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(lambda a: torch.cumsum(a * 2.0, -1) + 1.0)(x.to("spyre"))
    assert decompositions.fallback_counts()["aten.cumsum.default"] == before + 1
    torch.testing.assert_close(out.cpu().float(), torch.cumsum(x.float() * 2.0, -1) + 1.0,
                               atol=0.15, rtol=1e-2)


def _compiled_on_the_device(fn, *args):
    """fn compiled, in strict mode (eager twins run device kernels, never
    the CPU), against fn on the CPU."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True), torch.spyre.strict():
        got = torch.compile(fn)(*[a.to("spyre") for a in args])
    return got, fn(*args)


def test_eager_twins_of_division_pooling_and_solves():
    # x // k is div.Tensor_mode(x, k) after decomposition, with a Python
    # number where the schema takes a Tensor (its Scalar overload runs).
    ids = torch.randint(-50, 50, (32,))
    for fn in [lambda a: a // 2, lambda a: torch.div(a, 3, rounding_mode="trunc"),
               lambda a: a // a.clamp(min=1)]:
        got, want = _compiled_on_the_device(fn, ids)
        assert torch.equal(got.cpu(), want)
    # Funnel's pooling: windows with ceil-mode padding (masked loads)
    x = torch.randn(2, 1, 9, 16)
    got, want = _compiled_on_the_device(
        lambda a: torch.nn.functional.avg_pool2d(a, (2, 1), (2, 1), ceil_mode=True), x)
    torch.testing.assert_close(got.cpu(), want)
    # the gated delta rule's solve: an extern kernel whose result strides
    # (column-major matrices) compiled code checks
    a, b = torch.randn(2, 16, 16).tril(-1) * 0.1, torch.randn(2, 16, 4)
    got, want = _compiled_on_the_device(
        lambda p, q: torch.linalg.solve_triangular(p, q, upper=False, unitriangular=True) * 2,
        a, b)
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-5)
