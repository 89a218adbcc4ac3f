"""Factories and fills as device programs: full/zeros/ones/fill_ (views too),
arange, rand/randn/normal_/uniform_ from the device generator, triu/tril,
eye."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _no_fallbacks():
    torch.spyre.reset_fallback_stats()
    yield
    assert torch.spyre.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8,
                                   torch.int32, torch.int64, torch.bool])
def test_full_zeros_ones(dtype):
    value = True if dtype == torch.bool else 3
    for shape in [(7, 130), (67,), (2, 3, 65), (0, 4), ()]:
        assert torch.equal(torch.full(shape, value, dtype=dtype, device="spyre").cpu(),
                           torch.full(shape, value, dtype=dtype))
        assert torch.equal(torch.zeros(shape, dtype=dtype, device="spyre").cpu(), torch.zeros(shape, dtype=dtype))
        assert torch.equal(torch.ones(shape, dtype=dtype, device="spyre").cpu(), torch.ones(shape, dtype=dtype))
    if dtype.is_floating_point:
        got = torch.full((5, 70), 0.1, dtype=dtype, device="spyre").cpu()
        assert torch.equal(got, torch.full((5, 70), 0.1, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
def test_fill_views_keeps_neighbours(dtype):
    a = torch.arange(8 * 150).reshape(8, 150).to(dtype)
    x = a.to("spyre")
    torch.spyre.reset_op_stats()
    x[1:6, 3:77].fill_(-2)
    x[:, 149].fill_(9)
    x[7].zero_()
    x.t()[5:8].fill_(4)  # transposed view: still one device program, no host path
    a[1:6, 3:77] = -2
    a[:, 149] = 9
    a[7] = 0
    a.t()[5:8] = 4
    assert torch.equal(x.cpu(), a)
    assert torch.spyre.op_stats()["host_materializations"] == 0


def test_arange():
    for args, dtype in [((1000,), torch.int64), ((5, 1000, 3), torch.int64), ((-7, 300, 2), torch.int32),
                        ((0, 129), torch.float16), ((2.5, 70.0, 0.5), torch.float32), ((10, -3, -1), torch.int64),
                        ((0,), torch.int64)]:
        got = torch.arange(*args, dtype=dtype, device="spyre").cpu()
        assert torch.equal(got, torch.arange(*args, dtype=dtype)), args
    # Non-integral steps are computed in fp32 on the device, in double on the CPU.
    got = torch.arange(0, 10, 0.37, device="spyre").cpu()
    torch.testing.assert_close(got, torch.arange(0, 10, 0.37), atol=1e-6, rtol=1e-6)
    out = torch.empty(3, device="spyre", dtype=torch.int64)
    torch.arange(7, out=out)
    assert torch.equal(out.cpu(), torch.arange(7))
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device="spyre")


def test_random_is_reproducible_and_split_independent():
    torch.spyre.manual_seed(11)
    a = torch.rand(300, 201, device="spyre")
    torch.spyre.manual_seed(11)
    b = torch.rand(300, 201, device="spyre")
    assert torch.equal(a.cpu(), b.cpu())
    # The same counters drawn through another shape (another tiling and core
    # split) give the same numbers: element e draws counter offset + e.
    torch.spyre.manual_seed(11)
    c = torch.rand(201 * 300, device="spyre")
    assert torch.equal(c.cpu(), a.cpu().reshape(-1))
    d = torch.rand(300, 201, device="spyre")
    assert not torch.equal(d.cpu(), a.cpu())  # the offset moved on


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_distributions(dtype):
    torch.spyre.manual_seed(5)
    u = torch.empty(400, 250, dtype=dtype, device="spyre").uniform_(-2, 3).cpu().float()
    assert u.min() >= -2 and u.max() <= 3
    assert abs(u.mean().item() - 0.5) < 0.05 and abs(u.var().item() - 25 / 12) < 0.1
    n = torch.randn(400, 250, dtype=dtype, device="spyre").cpu().float()
    assert abs(n.mean().item()) < 0.02 and abs(n.std().item() - 1) < 0.02
    m = torch.empty(400, 250, dtype=dtype, device="spyre").normal_(3, 0.5).cpu().float()
    assert abs(m.mean().item() - 3) < 0.02 and abs(m.std().item() - 0.5) < 0.02
    g = torch.Generator(device="spyre").manual_seed(9)
    r1 = torch.rand(3, 70, generator=g, device="spyre").cpu()
    g.manual_seed(9)
    assert torch.equal(torch.rand(3, 70, generator=g, device="spyre").cpu(), r1)
    with pytest.raises(RuntimeError, match="std >= 0"):
        torch.empty(3, device="spyre").normal_(0, -1)


def test_random_on_a_view_leaves_neighbours():
    x = torch.zeros(6, 140, device="spyre")
    x[1:4, 3:100].uniform_(1, 2)
    got = x.cpu()
    assert (got[1:4, 3:100] >= 1).all()
    got[1:4, 3:100] = 0
    assert (got == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
@pytest.mark.parametrize("k", [-3, 0, 2, 100])
def test_triu_tril(dtype, k):
    a = (torch.randn(3, 9, 131) * 10).to(dtype)
    x = a.to("spyre")
    assert torch.equal(x.triu(k).cpu(), a.triu(k))
    assert torch.equal(x.tril(k).cpu(), a.tril(k))
    x2, a2 = x[1].clone(), a[1].clone()
    x2.triu_(k)
    a2.triu_(k)
    assert torch.equal(x2.cpu(), a2)
    mask = torch.ones(70, 70, dtype=torch.bool, device="spyre").tril()
    assert torch.equal(mask.cpu(), torch.ones(70, 70, dtype=torch.bool).tril())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64,
                                   torch.bool])
def test_eye(dtype):
    with torch.spyre.strict():
        for n, m in [(5, None), (3, 70), (70, 3), (1, 1), (0, 4)]:
            args = (n,) if m is None else (n, m)
            got = torch.eye(*args, dtype=dtype, device="spyre")
            assert torch.equal(got.cpu(), torch.eye(*args, dtype=dtype)), args
        out = torch.full((2, 2), 7, dtype=dtype).to("spyre")
        torch.eye(4, 6, out=out)  # resized, every element written
        assert torch.equal(out.cpu(), torch.eye(4, 6, dtype=dtype))
        with pytest.raises(RuntimeError, match="n must be greater or equal to 0"):
            torch.eye(-1, device="spyre")
