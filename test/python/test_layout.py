"""Device layouts: exact device_size/stride_map, padding never visible, round
trips of odd shapes and dtypes, non-default layouts."""

import math

import pytest
import torch

import torch_spyre


def expected_default(sizes, element_size):
    """The published default, written out independently of the C++ code."""
    e = 128 // element_size
    kept = [d for d in sizes if d != 1]
    if not kept:
        return [1, e]
    if len(kept) == 1:
        return [math.ceil(kept[0] / e), e]
    return kept[1:-1] + [math.ceil(kept[-1] / e), kept[0], e]


@pytest.mark.parametrize("sizes,dtype,device_size,stride_map", [
    ((4, 128), torch.float32, [4, 4, 32], [32, 128, 1]),
    ((3, 130), torch.float16, [3, 3, 64], [64, 130, 1]),
    ((2, 3, 130), torch.float16, [3, 3, 2, 64], [130, 64, 390, 1]),
    ((2, 3, 5, 7), torch.float32, [3, 5, 1, 2, 32], [35, 7, 32, 105, 1]),
    ((300,), torch.int8, [3, 128], [128, 1]),
    ((10,), torch.int64, [1, 16], [16, 1]),
    ((), torch.float32, [1, 32], [-1, 1]),
    ((1, 1), torch.bool, [1, 128], [-1, 1]),
    ((1, 200), torch.bfloat16, [4, 64], [64, 1]),
    ((5, 1, 70), torch.float16, [2, 5, 64], [64, 70, 1]),
])
def test_default_layout_exact(sizes, dtype, device_size, stride_map):
    x = torch.zeros(sizes, dtype=dtype).to("spyre")
    layout = x.device_tensor_layout()
    assert layout.device_size == device_size
    assert layout.stride_map == stride_map
    assert layout.device_size == expected_default(list(sizes), x.element_size())
    assert layout.device_bytes == math.prod(device_size) * x.element_size()
    assert torch_spyre.default_layout(sizes, dtype) == layout


def random_tensor(sizes, dtype):
    if dtype == torch.bool:
        return torch.rand(sizes) > 0.5
    if dtype.is_floating_point:
        return torch.randn(sizes).to(dtype)
    return torch.randint(-100, 100, sizes).to(dtype)


@pytest.mark.parametrize("sizes", [(3, 130), (130,), (), (0,), (0, 5), (5, 0), (2, 3, 130),
                                   (2, 3, 4, 65), (1, 1, 129), (7, 1), (64,), (33, 65),
                                   (257, 129), (3, 40, 70), (130, 70, 200)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64, torch.bool,
                                   torch.bfloat16, torch.int8])
def test_round_trip_is_exact(sizes, dtype):
    x = random_tensor(sizes, dtype)
    y = x.to("spyre")
    assert y.shape == x.shape and y.dtype == x.dtype and y.stride() == x.stride()
    assert torch.equal(y.cpu(), x)


def test_padding_is_never_visible():
    x = torch.randn(3, 130).half()
    y = x.to("spyre")
    # The storage as PyTorch sees it holds exactly the logical bytes.
    assert y.untyped_storage().nbytes() == x.untyped_storage().nbytes()
    assert bytes(y.untyped_storage().cpu()) == bytes(x.untyped_storage())
    assert torch.equal(y.flatten().cpu(), x.flatten())
    assert torch.equal(y.view(-1)[128:134].cpu(), x.view(-1)[128:134])


def test_layout_is_shared_by_views():
    y = torch.randn(6, 200).to("spyre")
    assert y[2:].device_tensor_layout() == y.device_tensor_layout()
    assert y.t().device_tensor_layout() == y.device_tensor_layout()


def test_transposed_source_keeps_memory_order():
    x = torch.randn(100, 40).t()  # stride (1, 40)
    y = x.to("spyre")
    assert y.stride() == x.stride()
    assert y.device_tensor_layout().host_size == [100, 40]
    assert torch.equal(y.cpu(), x)


@pytest.mark.parametrize("stick_dim", [0, 1, -2])
def test_non_default_stick_dim(stick_dim):
    x = torch.randn(70, 130).half()
    y = torch_spyre.to_device(x, stick_dim=stick_dim)
    layout = y.device_tensor_layout()
    stick = stick_dim % 2
    e = 64
    if stick == 0:
        assert layout.device_size == [math.ceil(70 / e), 130, e]
        assert layout.stride_map == [e * 130, 1, 130]
    else:
        assert layout.device_size == [3, 70, e]
    assert torch.equal(y.cpu(), x)
    assert torch.equal((y[3:9, 5:100:7]).cpu(), x[3:9, 5:100:7])


def test_custom_layout_and_validation():
    # fp32 [8, 40]: sticks along dim 1, rows tiled by two.
    layout = torch_spyre._C.custom_layout([8, 40], torch.float32, [4, 2, 2, 32],
                                          [0, 1, 0, 1], [2, 32, 1, 1])
    assert layout.stride_map == [80, 32, 40, 1]
    x = torch.randn(8, 40)
    y = torch_spyre.to_device(x, layout)
    assert y.device_tensor_layout() == layout
    assert torch.equal(y.cpu(), x)
    with pytest.raises(ValueError, match="tiles it exactly"):
        torch_spyre._C.custom_layout([8, 40], torch.float32, [4, 2, 2, 32],
                                     [0, 1, 0, 1], [1, 32, 1, 1])
    with pytest.raises(ValueError, match="last device dimension"):
        torch_spyre._C.custom_layout([8, 40], torch.float32, [8, 40], [0, 1], [1, 1])
    with pytest.raises(ValueError, match="does not fit"):
        torch_spyre.to_device(torch.randn(4, 4), layout)


def test_empty_with_layout():
    y = torch_spyre.empty((5, 9), torch.float16, stick_dim=0)
    assert y.shape == (5, 9) and y.device.type == "spyre"
    y.copy_(torch.ones(5, 9))
    assert torch.equal(y.cpu(), torch.ones(5, 9, dtype=torch.float16))


def test_layout_of_cpu_tensor_is_an_error():
    with pytest.raises(ValueError, match="expected a spyre tensor"):
        torch.ones(3).device_tensor_layout()
