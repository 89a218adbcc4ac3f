"""Copies honour storage offsets and strides of views on both sides."""

import pytest
import torch

from conftest import needs_two_devices


def make(rows=6, cols=200, dtype=torch.float32):
    return torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
def test_read_views_with_offsets(dtype):
    x = make(dtype=dtype)
    y = x.to("spyre")
    for view in (lambda t: t[2], lambda t: t[1:4, 10:150:3], lambda t: t.t()[5:9],
                 lambda t: t[:, 199], lambda t: t.narrow(1, 63, 70),
                 lambda t: t.view(-1)[7:1000:13], lambda t: t[3:, ::-1] if False else t[3:, 1::2],
                 lambda t: t.unfold(1, 5, 64), lambda t: t.diagonal(offset=3)):
        got = view(y)
        want = view(x)
        assert got.storage_offset() == want.storage_offset()
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), want)
        assert torch.equal(got.contiguous().cpu(), want.contiguous())


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_write_views_with_offsets(dtype):
    x = make(dtype=dtype)
    y = x.to("spyre")
    src = torch.randn(3, 47).to(dtype)
    x[1:4, 10:150:3] = src
    y[1:4, 10:150:3] = src
    assert torch.equal(y.cpu(), x)
    col = torch.randn(6).to(dtype)
    x[:, 130] = col
    y[:, 130] = col
    x.t()[7] = 5
    y.t()[7] = 5
    assert torch.equal(y.cpu(), x)


def test_copy_from_non_contiguous_host_source():
    host = torch.randn(40, 300)[5:25:2, 7:270:4]  # offset and strides
    y = torch.empty(host.shape, device="spyre")
    y.copy_(host)
    assert torch.equal(y.cpu(), host)
    z = host.to("spyre")
    assert torch.equal(z.cpu(), host.contiguous())


def test_copy_into_non_contiguous_host_destination():
    y = torch.randn(8, 130).to("spyre")
    out = torch.zeros(20, 300)
    out[2:10, 5:135].copy_(y)
    assert torch.equal(out[2:10, 5:135], y.cpu())
    assert out[:2].abs().sum() == 0 and out[:, :5].abs().sum() == 0
    out2 = torch.zeros(130, 8).t()
    out2.copy_(y)
    assert torch.equal(out2, y.cpu())


def test_device_to_device_views_and_dtypes():
    x = make()
    y = x.to("spyre")
    z = torch.zeros(10, 300, device="spyre")
    z[2:8, 50:250].copy_(y)
    want = torch.zeros(10, 300)
    want[2:8, 50:250] = x
    assert torch.equal(z.cpu(), want)
    full = torch.empty_like(y)
    full.copy_(y)  # whole storage, same layout: one device copy
    assert torch.equal(full.cpu(), x)
    half = torch.empty(6, 200, dtype=torch.float16, device="spyre")
    half.copy_(y)
    assert torch.equal(half.cpu(), x.half())
    assert torch.equal(y.clone().cpu(), x)
    assert torch.equal(y.t().contiguous().cpu(), x.t().contiguous())


def test_broadcast_copy_and_dtype_view():
    y = torch.empty(4, 70, device="spyre")
    y.copy_(torch.arange(70.0))
    assert torch.equal(y.cpu(), torch.arange(70.0).expand(4, 70))
    ints = y.view(torch.int32)
    assert torch.equal(ints.cpu(), y.cpu().view(torch.int32))


def test_fill_zero_and_scalars_on_views():
    y = torch.randn(5, 130).to("spyre")
    x = y.cpu()
    y[1:3, 60:70].fill_(2.5)
    x[1:3, 60:70].fill_(2.5)
    y[4].zero_()
    x[4].zero_()
    assert torch.equal(y.cpu(), x)
    full = torch.empty(3, 3, dtype=torch.int32, device="spyre").fill_(-1)
    assert torch.equal(full.cpu(), torch.full((3, 3), -1, dtype=torch.int32))
    assert torch.zeros(3, 65, device="spyre").cpu().abs().sum() == 0
    assert torch.ones(2, 2, device="spyre", dtype=torch.float16).cpu().sum() == 4
    assert y[2, 65].item() == x[2, 65].item()


def test_resize_and_set():
    y = torch.arange(10.0).to("spyre")
    y.resize_(20)
    assert torch.equal(y[:10].cpu(), torch.arange(10.0))
    z = torch.empty(0, device="spyre")
    z.set_(y.untyped_storage(), 2, (2, 3), (3, 1))
    assert torch.equal(z.cpu(), torch.arange(2.0, 8.0).reshape(2, 3))
    w = torch.empty(0, device="spyre").set_(y)
    assert w.is_set_to(y)
    out = torch.empty(0, device="spyre")
    torch.add(torch.ones(4, 4, device="spyre"), 1, out=out)
    assert out.shape == (4, 4) and torch.equal(out.cpu(), torch.full((4, 4), 2.0))


@needs_two_devices()
def test_across_devices_with_views():
    x = make()
    a = x.to("spyre:0")
    b = torch.zeros(8, 220, device="spyre:1")
    b[1:7, 10:210].copy_(a)
    assert b.device == torch.device("spyre:1")
    assert torch.equal(b[1:7, 10:210].cpu(), x)
    c = a[2:5, 3:100:2].to("spyre:1")
    assert torch.equal(c.cpu(), x[2:5, 3:100:2])
