"""Elementwise ops as device programs, against the CPU.

Tolerances: the device computes 16-bit floats in fp32 and rounds once, as
PyTorch's CPU kernels do, but transcendental functions (exp, tanh, erf, ...)
come from different libraries (Sleef on the CPU, libm in the emulator), so
an fp32 result may differ in the last bit or two and a 16-bit result may
round the other way: fp16 atol=rtol=1e-3 (one ulp near 1), bf16 atol=rtol=
1e-2, fp32 atol=1e-6 rtol=1e-5. Arithmetic, comparisons, selects and
conversions must match exactly.
"""

import pytest
import torch

FLOATS = [torch.float16, torch.bfloat16, torch.float32]
INTS = [torch.int32, torch.int64]
TOL = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


@pytest.fixture(autouse=True)
def _no_fallbacks():
    torch.spyre.reset_fallback_stats()
    torch.spyre.reset_op_stats()
    yield
    assert torch.spyre.fallback_stats() == {}


def rand(shape, dtype, low=-3.0, high=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) * (high - low) + low).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    lo, hi = int(low) * 10, int(high) * 10 + 1
    if dtype in (torch.int8, torch.uint8):
        lo, hi = max(lo, -128 if dtype == torch.int8 else 0), min(hi, 128)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def same(got, want, exact=False):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), (got, want)
    elif exact:
        torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)
    else:
        tol = TOL[want.dtype] if want.dtype in TOL else 1e-5
        atol = 1e-6 if want.dtype == torch.float32 else tol
        torch.testing.assert_close(got, want, atol=atol, rtol=tol, equal_nan=True)


def views(t):
    """The same values through: contiguous, a strided view, a view with an
    offset and unaligned columns."""
    big = torch.zeros((t.shape[0] + 3, t.shape[-1] * 2 + 5) if t.dim() == 2 else (0,), dtype=t.dtype)
    out = [("contiguous", t)]
    if t.dim() == 2:
        big[2:2 + t.shape[0], 5:5 + 2 * t.shape[1]:2] = t
        out.append(("strided", big[2:2 + t.shape[0], 5:5 + 2 * t.shape[1]:2]))
        big2 = torch.zeros(t.shape[0] + 1, t.shape[1] + 9, dtype=t.dtype)
        big2[1:, 9:] = t
        out.append(("offset", big2[1:, 9:]))
    return out


def on_spyre(t):
    """`t`'s view of a spyre copy of its base, so offsets and strides stay."""
    base = t._base if t._base is not None else t
    return base.to("spyre").as_strided(t.shape, t.stride(), t.storage_offset())


# ---- binary ------------------------------------------------------------------

BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "remainder": torch.remainder,
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b) if a.is_floating_point() else torch.pow(a, b.abs() % 3),
}
EXACT_BINARY = {"add", "sub", "mul", "maximum", "minimum"}


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name, dtype):
    f = BINARY[name]
    a = rand((7, 130), dtype, seed=1)
    b = rand((7, 130), dtype, seed=2)
    if name in ("div", "remainder"):
        b = torch.where(b == 0, torch.ones_like(b), b)
    for label, av in views(a):
        for _, bv in views(b)[:2]:
            want = f(av, bv)
            got = f(on_spyre(av), on_spyre(bv))
            same(got, want, exact=name in EXACT_BINARY)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
@pytest.mark.parametrize("shapes", [((7, 1), (7, 130)), ((130,), (7, 130)), ((3, 1, 67), (1, 5, 67)),
                                    ((), (37,)), ((1,), (2, 3, 65))])
def test_binary_broadcasting(shapes, dtype):
    a, b = rand(shapes[0], dtype, seed=3), rand(shapes[1], dtype, seed=4)
    x, y = a.to("spyre"), b.to("spyre")
    same(x * y, a * b, exact=True)
    same(torch.maximum(y, x), torch.maximum(b, a), exact=True)
    same(x < y, a < b)


def test_binary_scalars_and_promotion():
    a = rand((5, 70), torch.float16)
    i = rand((5, 70), torch.int32)
    x, n = a.to("spyre"), i.to("spyre")
    # A float scalar meets fp16 values in fp32 on the device; the CPU may
    # round it first: one ulp.
    same(x * 2.1, a * 2.1)
    same(3 - x, 3 - a)
    same(x / 3, a / 3)  # the CPU multiplies by 1/3 (one ulp)
    same(n / 4, i / 4)  # int / int -> float32
    same(n * 3, i * 3)
    same(n * 1.5, i * 1.5)
    same(x * n, a * i, exact=True)  # -> float16
    same(x.float() + x, a.float() + a, exact=True)
    same(torch.remainder(n, -7), torch.remainder(i, -7))
    same(torch.remainder(x, 0.7), torch.remainder(a, 0.7))
    same(x ** 2, a ** 2)
    same(2 ** x, 2 ** a)
    same(n ** 2, i ** 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
def test_binary_in_place_and_out(dtype):
    a, b = rand((6, 150), dtype, seed=5), rand((6, 150), dtype, seed=6)
    x, y = a.to("spyre"), b.to("spyre")
    x[1:5, 7:140].mul_(y[0:4, 0:133])
    a[1:5, 7:140].mul_(b[0:4, 0:133])
    same(x, a, exact=True)
    out = torch.empty(6, 150, dtype=dtype, device="spyre")
    torch.maximum(x, y, out=out)
    same(out, torch.maximum(a, b), exact=True)
    out2 = torch.zeros(8, 200, dtype=dtype)
    outs = out2.to("spyre")
    torch.minimum(x, y, out=outs[1:7, 3:153])
    torch.minimum(a, b, out=out2[1:7, 3:153])
    same(outs, out2, exact=True)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.div(x.float(), y.float(), out=torch.empty(6, 150, dtype=torch.int64, device="spyre"))


def test_binary_zero_size_and_overlap():
    z = torch.empty(0, 5, device="spyre")
    assert (z * z).shape == (0, 5)
    x = torch.arange(10.0).to("spyre")
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.mul(x[:5], x[:5], out=x[2:7])


# ---- comparisons and logical ops ---------------------------------------------

COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


@pytest.mark.parametrize("dtype", FLOATS + INTS + [torch.bool])
@pytest.mark.parametrize("name", list(COMPARE))
def test_compare(name, dtype):
    f = COMPARE[name]
    a = rand((9, 67), dtype, -2, 2, seed=7)
    b = rand((9, 67), dtype, -2, 2, seed=8)
    b[::2] = a[::2]  # some equal pairs
    x, y = a.to("spyre"), b.to("spyre")
    same(f(x, y), f(a, b))
    same(f(x[2:7, 3:50], y[0:5, 10:57]), f(a[2:7, 3:50], b[0:5, 10:57]))
    same(f(x, y[3]), f(a, b[3]))
    if dtype != torch.bool:
        same(f(x, 1), f(a, 1))
        x2, a2 = x.clone(), a.clone()
        getattr(x2, name + "_")(y)
        getattr(a2, name + "_")(b)
        same(x2, a2)
    out = torch.empty(9, 67, dtype=torch.float32, device="spyre")
    f(x, y, out=out)
    same(out, f(a, b).float())


@pytest.mark.parametrize("dtype", [torch.bool, torch.float16, torch.int64])
def test_logical(dtype):
    a, b = rand((5, 130), dtype, -1, 1, seed=9), rand((5, 130), dtype, -1, 1, seed=10)
    x, y = a.to("spyre"), b.to("spyre")
    same(torch.logical_and(x, y), torch.logical_and(a, b))
    same(torch.logical_or(x, y[1]), torch.logical_or(a, b[1]))
    same(torch.logical_not(x), torch.logical_not(a))
    x2, a2 = x.clone(), a.clone()
    x2.logical_not_()
    a2.logical_not_()
    same(x2, a2)


# ---- unary -------------------------------------------------------------------

POSITIVE = {"log", "sqrt", "rsqrt"}
UNARY = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "reciprocal": torch.reciprocal,
    "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "abs": torch.abs,
    "neg": torch.neg, "floor": torch.floor, "relu": torch.relu,
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
}
EXACT_UNARY = {"abs", "neg", "floor", "relu"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dtype):
    f = UNARY[name]
    low = 0.05 if name in POSITIVE else -4.0
    a = rand((7, 130), dtype, low, 4.0, seed=11)
    if name == "reciprocal":
        a = torch.where(a.abs() < 0.05, torch.ones_like(a), a)
    for _, av in views(a):
        same(f(on_spyre(av)), f(av), exact=name in EXACT_UNARY)
    same(f(a[0].to("spyre")), f(a[0]), exact=name in EXACT_UNARY)  # 1-D


@pytest.mark.parametrize("name", ["exp", "sqrt", "abs", "neg", "floor", "relu", "sigmoid"])
def test_unary_integers(name):
    a = rand((5, 33), torch.int64, 0, 3, seed=12)
    same(UNARY[name](a.to("spyre")), UNARY[name](a))


@pytest.mark.parametrize("name", ["exp", "tanh", "abs", "neg", "relu", "sigmoid", "gelu", "silu"])
def test_unary_in_place_and_out(name):
    a = rand((6, 100), torch.float16, seed=13)
    x = a.to("spyre")
    f = UNARY[name]
    method = name + "_"
    if name in ("gelu", "silu"):
        out = torch.empty(6, 100, dtype=torch.float16, device="spyre")
        getattr(torch.ops.aten, name).out(x, out=out)
        same(out, f(a))
    else:
        x2, a2 = x.clone(), a.clone()
        getattr(x2[1:4, 5:90], method)()
        getattr(a2[1:4, 5:90], method)()
        same(x2, a2, exact=name in EXACT_UNARY)
        if name != "relu":
            out = torch.empty(0, dtype=torch.float16, device="spyre")
            getattr(torch, name)(x, out=out)
            same(out, f(a), exact=name in EXACT_UNARY)


def test_special_values():
    a = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-8, -1e-8, 65504.0])
    x = a.to("spyre")
    for f in (torch.exp, torch.relu, torch.sigmoid, torch.tanh, torch.abs, torch.floor,
              torch.sqrt, torch.log, torch.reciprocal):
        same(f(x), f(a))
    same(torch.maximum(x, a.flip(0).to("spyre")),
         torch.maximum(a, a.flip(0)), exact=True)
    same(x.clamp(min=0.5), a.clamp(min=0.5), exact=True)


# ---- where, masked_fill, clamp -------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64])
def test_where(dtype):
    a, b = rand((7, 130), dtype, seed=14), rand((7, 130), dtype, seed=15)
    c = rand((7, 130), torch.bool, seed=16)
    x, y, m = a.to("spyre"), b.to("spyre"), c.to("spyre")
    same(torch.where(m, x, y), torch.where(c, a, b), exact=True)
    same(torch.where(m[:, 3:4], x, y[2]), torch.where(c[:, 3:4], a, b[2]), exact=True)
    same(torch.where(m, x, 0), torch.where(c, a, 0), exact=True)
    same(torch.where(m, 2, x), torch.where(c, 2, a), exact=True)
    same(torch.where(m, x.float(), y), torch.where(c, a.float(), b), exact=True)
    out = torch.empty(7, 130, dtype=dtype, device="spyre")
    torch.where(m, x, y, out=out)
    same(out, torch.where(c, a, b), exact=True)
    with pytest.raises(RuntimeError, match="boolean"):
        torch.where(x, x, y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int32])
def test_masked_fill(dtype):
    a = rand((9, 70), dtype, seed=17)
    c = rand((9, 70), torch.bool, seed=18)
    x, m = a.to("spyre"), c.to("spyre")
    same(x.masked_fill(m, -7), a.masked_fill(c, -7), exact=True)
    same(x.masked_fill(m[4], 3), a.masked_fill(c[4], 3), exact=True)  # broadcast mask
    same(x.masked_fill(m, torch.tensor(5)), a.masked_fill(c, torch.tensor(5)), exact=True)
    same(x.masked_fill(m, torch.tensor(5).to("spyre")), a.masked_fill(c, torch.tensor(5)), exact=True)
    if dtype.is_floating_point:
        same(x.masked_fill(m, float("-inf")), a.masked_fill(c, float("-inf")), exact=True)
    x2, a2 = x.clone(), a.clone()
    x2[2:6, 1:60].masked_fill_(m[0:4, 0:59], 1)
    a2[2:6, 1:60].masked_fill_(c[0:4, 0:59], 1)
    same(x2, a2, exact=True)
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.masked_fill(x > 0 if False else m.int(), 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
def test_clamp(dtype):
    a = rand((7, 130), dtype, seed=19)
    x = a.to("spyre")
    same(x.clamp(-1, 1), a.clamp(-1, 1), exact=True)
    same(x.clamp(min=0), a.clamp(min=0), exact=True)
    same(x.clamp(max=0), a.clamp(max=0), exact=True)
    same(torch.clamp_min(x, 1), torch.clamp_min(a, 1), exact=True)
    same(torch.clamp_max(x, 1), torch.clamp_max(a, 1), exact=True)
    lo, hi = rand((130,), dtype, -3, 0, seed=20), rand((7, 1), dtype, 0, 3, seed=21)
    same(x.clamp(lo.to("spyre"), hi.to("spyre")), a.clamp(lo, hi), exact=True)
    same(x.clamp(2, 1), a.clamp(2, 1), exact=True)  # min > max gives max
    x2, a2 = x.clone(), a.clone()
    x2[1:3].clamp_(-1, 1)
    a2[1:3].clamp_(-1, 1)
    same(x2, a2, exact=True)
    out = torch.empty(7, 130, dtype=dtype, device="spyre")
    torch.clamp(x, -2, 2, out=out)
    same(out, a.clamp(-2, 2), exact=True)
    with pytest.raises(RuntimeError, match="At least one"):
        x.clamp()


# ---- conversions and device copies ---------------------------------------------

CONVERT = [torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32, torch.int64, torch.bool, torch.uint8]


@pytest.mark.parametrize("src", CONVERT)
@pytest.mark.parametrize("dst", CONVERT)
def test_to_dtype_on_device(src, dst):
    a = rand((7, 130), src, -100, 100, seed=22) if src not in (torch.uint8,) else rand((7, 130), src, 0, 20, seed=22)
    if src.is_floating_point and not dst.is_floating_point and dst != torch.bool:
        a = a.clamp(-100, 100).trunc() + 0.25  # in range of every integer dtype
        if dst == torch.uint8:
            a = a.abs()
    x = a.to("spyre")
    torch.spyre.reset_op_stats()
    got = x.to(dst)
    same(got, a.to(dst), exact=True)
    assert torch.spyre.op_stats()["host_materializations"] == 0


def test_copy_between_views_is_a_device_program():
    a = rand((9, 140), torch.float32, seed=23)
    x = a.to("spyre")
    dst = torch.zeros(12, 200, dtype=torch.float16, device="spyre")
    torch.spyre.reset_op_stats()
    dst[2:11, 30:170].copy_(x)
    dst[1, 3:143].copy_(x[5])
    assert torch.spyre.op_stats()["host_materializations"] == 0
    assert torch.spyre.op_stats()["launches"] >= 2
    want = torch.zeros(12, 200, dtype=torch.float16)
    want[2:11, 30:170] = a
    want[1, 3:143] = a[5]
    same(dst, want, exact=True)
    # src broadcasts
    dst.copy_(torch.tensor(1.5).to("spyre"))
    same(dst, torch.full((12, 200), 1.5, dtype=torch.float16), exact=True)


# Out-of-range and NaN values have no defined integer in C++; the CPU's casts
# give x86's "integer indefinite" (the target's minimum), narrower integers
# going through int32. The emulator models that, so results match the CPU
# the tests compare with (on x86 hosts).
@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"),
                    reason="the CPU reference for out-of-range casts is x86's")
@pytest.mark.parametrize("src", FLOATS)
@pytest.mark.parametrize("dst", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool])
def test_float_to_integer_casts_of_any_value_match_the_cpu(src, dst):
    values = torch.tensor([300.7, -1e10, 1e10, float("nan"), -3.5, 255.9, 256.0,
                           2.0 ** 31, -2.0 ** 31 - 256, 2.0 ** 63, -2.0 ** 63, 3e38,
                           float("inf"), -float("inf"), -0.7, 127.5, -128.9])
    x = values.to(src)
    expected = x.to(dst)
    assert torch.equal(x.to("spyre").to(dst).cpu(), expected)
    # A strided view, through the same conversion.
    assert torch.equal(x.to("spyre")[1::3].to(dst).cpu(), expected[1::3])


SCALAR_OPS = {
    "add": lambda a, s: a + s, "sub": lambda a, s: a - s, "rsub": lambda a, s: s - a,
    "mul": lambda a, s: a * s, "div": lambda a, s: a / s, "rdiv": lambda a, s: s / a,
    "mul_": lambda a, s: a.clone().mul_(s),
    "trunc_div": lambda a, s: torch.div(a, s, rounding_mode="trunc"),
    "add_alpha": lambda a, s: torch.add(a, a * 0.5, alpha=s),
    "sub_alpha": lambda a, s: torch.sub(a, a * 0.25, alpha=s),
    "lt": lambda a, s: a < s, "eq": lambda a, s: a == s,
}


# The CPU multiplies and divides a 16-bit tensor by a Python scalar in fp32
# with the scalar as given, but rounds add's, sub's and alpha's scalars to the
# 16-bit dtype first: the device follows both rules, bit for bit. Scalars not
# exact in 16 bits (0.1, 3.7, 1/7 ...) tell the two apart. 4096 elements:
# the CPU's vectorised loop (its scalar tail rounds alpha differently).
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(SCALAR_OPS))
def test_16_bit_tensor_with_python_scalars_matches_the_cpu_exactly(dtype, name):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(4096, generator=g) * 20).to(dtype)
    op = SCALAR_OPS[name]
    for scalar in [0.1, 3.7, 1 / 7, -2.3e-3, 123.456, 1e5]:
        try:
            expected = op(x, scalar)
        except RuntimeError as error:  # alpha=1e5 does not fit fp16
            with pytest.raises(RuntimeError, match="without overflow"):
                op(x.to("spyre"), scalar)
            assert "without overflow" in str(error)
            continue
        got = op(x.to("spyre"), scalar).cpu()
        assert torch.equal(got, expected), (name, scalar)

