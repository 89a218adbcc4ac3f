"""The rest of PyTorch's accelerator contract (issue 12): autocast, device
capability, device index errors, DLPack, tensor metadata, quantized tensors,
the recurrent layers and per-device random state. Each test compares with
the CPU or asserts the error type and a message that says what to do."""

import io

import pytest
import torch
import torch.nn.functional as F
import torch.utils.dlpack

from conftest import needs_two_devices
from ops_testing import keep_busy


def _close(spyre, cpu, atol=1e-3, rtol=1e-3):
    assert spyre.device.type == "spyre"
    assert spyre.dtype == cpu.dtype, (spyre.dtype, cpu.dtype)
    torch.testing.assert_close(spyre.cpu(), cpu, atol=atol, rtol=rtol)


# --- autocast ----------------------------------------------------------------------

def test_amp_supported_dtypes():
    assert torch.spyre.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.amp.is_autocast_available("spyre")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_runs_matmuls_in_lower_precision(dtype):
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    bias = torch.randn(8)
    x3, y3 = torch.randn(2, 8, 16), torch.randn(2, 16, 8)
    weight = torch.randn(8, 16)
    s = {name: t.to("spyre") for name, t in
         dict(a=a, b=b, bias=bias, x3=x3, y3=y3, weight=weight).items()}
    with torch.autocast("spyre", dtype=dtype):
        assert torch.is_autocast_enabled("spyre")
        assert torch.get_autocast_dtype("spyre") == dtype
        results = {
            "matmul": torch.matmul(s["a"], s["b"]),
            "mm": torch.mm(s["a"], s["b"]),
            "linear": F.linear(s["a"], s["weight"], s["bias"]),
            "bmm": torch.bmm(s["x3"], s["y3"]),
            "addmm": torch.addmm(s["bias"], s["a"], s["b"]),
            "baddbmm": torch.baddbmm(torch.zeros(2, 8, 8, device="spyre"),
                                     s["x3"], s["y3"]),
        }
    low = lambda t: t.to(dtype)  # noqa: E731
    expected = {
        "matmul": low(a) @ low(b),
        "mm": low(a) @ low(b),
        "linear": F.linear(low(a), low(weight), low(bias)),
        "bmm": torch.bmm(low(x3), low(y3)),
        "addmm": torch.addmm(low(bias), low(a), low(b)),
        "baddbmm": torch.bmm(low(x3), low(y3)),
    }
    tol = 2e-2 if dtype == torch.float16 else 1e-1
    for name, result in results.items():
        assert result.dtype == dtype, name
        _close(result, expected[name], atol=tol, rtol=tol)


def test_autocast_runs_reductions_norms_and_losses_in_float32():
    torch.manual_seed(1)
    x = torch.randn(4, 64).half()
    target = torch.randn(4, 64).half()
    labels = torch.tensor([1, 0, 3, 2])
    xs, ts, ls = x.to("spyre"), target.to("spyre"), labels.to("spyre")
    xf, tf = x.float(), target.float()
    with torch.autocast("spyre", dtype=torch.float16):
        results = {
            "softmax": torch.softmax(xs, -1),
            "log_softmax": torch.log_softmax(xs, -1),
            "exp": torch.exp(xs),
            "log": torch.log(xs.abs() + 1),
            "sum": torch.sum(xs, -1),
            "layer_norm": F.layer_norm(xs, (64,)),
            "mse_loss": F.mse_loss(xs, ts),
            "nll_loss": F.nll_loss(xs, ls),
        }
    expected = {
        "softmax": torch.softmax(xf, -1),
        "log_softmax": torch.log_softmax(xf, -1),
        "exp": torch.exp(xf),
        "log": torch.log((x.abs() + 1).float()),
        "sum": torch.sum(xf, -1),
        "layer_norm": F.layer_norm(xf, (64,)),
        "mse_loss": F.mse_loss(xf, tf),
        "nll_loss": F.nll_loss(xf, labels),
    }
    for name, result in results.items():
        _close(result, expected[name], atol=1e-2, rtol=1e-2)


def test_autocast_refuses_binary_cross_entropy_as_cuda_does():
    p = torch.rand(4, device="spyre")
    with torch.autocast("spyre", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, torch.ones(4, device="spyre"))


def test_nested_autocast():
    a = torch.randn(8, 8)
    s = a.to("spyre")
    with torch.autocast("spyre", dtype=torch.float16):
        outer = s @ s
        with torch.autocast("spyre", enabled=False):
            inner_off = s @ s
            assert not torch.is_autocast_enabled("spyre")
        with torch.autocast("spyre", dtype=torch.bfloat16):
            inner_bf16 = s @ s
        after = s @ s
    assert not torch.is_autocast_enabled("spyre")
    plain = s @ s
    assert (outer.dtype, inner_off.dtype, inner_bf16.dtype, after.dtype, plain.dtype) == (
        torch.float16, torch.float32, torch.bfloat16, torch.float16, torch.float32)
    _close(inner_off, a @ a, atol=1e-3, rtol=1e-3)
    _close(inner_bf16, a.bfloat16() @ a.bfloat16(), atol=1e-1, rtol=2e-2)


def test_autocast_with_an_unsupported_dtype_warns_and_disables():
    s = torch.randn(4, 4, device="spyre")
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("spyre", dtype=torch.float64):
            assert (s @ s).dtype == torch.float32


def test_compile_under_autocast_matches_eager():
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8)).to("spyre")
    x = torch.randn(4, 16, device="spyre")

    def fn(x):
        return torch.softmax(model(x), -1), model(x)

    with torch.autocast("spyre", dtype=torch.float16):
        eager_soft, eager_out = fn(x)
        compiled_soft, compiled_out = torch.compile(fn)(x)
    assert eager_out.dtype == compiled_out.dtype == torch.float16
    assert eager_soft.dtype == compiled_soft.dtype == torch.float32
    torch.testing.assert_close(compiled_out.cpu(), eager_out.cpu(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(compiled_soft.cpu(), eager_soft.cpu(), atol=1e-3, rtol=1e-2)


def test_grad_scaler_on_spyre_matches_cpu():
    results = {}
    for device in ("cpu", "spyre"):
        torch.manual_seed(3)
        model = torch.nn.Linear(4, 2).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=1024.0)
        x = torch.arange(8.0).reshape(2, 4).to(device)
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        # An inf gradient: the step is skipped and the scale halves.
        before = model.weight.detach().cpu().clone()
        optimizer.zero_grad()
        scaler.scale(model(x).sum() * float("inf")).backward()
        scaler.step(optimizer)
        scaler.update()
        assert torch.equal(model.weight.detach().cpu(), before)
        results[device] = (model.weight.detach().cpu(), scaler.get_scale())
    torch.testing.assert_close(results["spyre"][0], results["cpu"][0])
    assert results["spyre"][1] == results["cpu"][1] == 512.0


# --- capability and device indices --------------------------------------------------

def test_device_capability():
    capability = torch.accelerator.get_device_capability("spyre:0")
    dtypes = capability["supported_dtypes"]
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                  torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool):
        assert dtype in dtypes, dtype
    for dtype in (torch.complex64, torch.complex128, torch.qint8):
        assert dtype not in dtypes, dtype
    # Every supported dtype can really be allocated; the others are refused.
    for dtype in dtypes:
        assert torch.empty(3, dtype=dtype, device="spyre").dtype == dtype
    with pytest.raises(TypeError, match="not supported on the spyre device"):
        torch.empty(3, dtype=torch.complex64, device="spyre")
    assert torch.spyre.get_device_capability() == capability
    assert torch.spyre.get_device_capability(0) == capability


def test_out_of_range_device_index_is_a_runtime_error():
    count = torch.spyre.device_count()
    with pytest.raises(RuntimeError, match="out of range.*SPYRE_SIM_DEVICES"):
        torch.empty(2, device=f"spyre:{count + 5}")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ones(2).to(f"spyre:{count}")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.spyre.get_device_capability(count)
    with pytest.raises(RuntimeError, match="out of range"):
        torch.spyre.set_device(count)


# --- DLPack -----------------------------------------------------------------------------

DLPACK_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                 torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                 torch.bool]


@pytest.mark.parametrize("dtype", DLPACK_DTYPES)
def test_dlpack_round_trip_shares_memory(dtype):
    cpu = (torch.arange(2 * 3 * 5) % 7).reshape(2, 3, 5).to(dtype)
    x = cpu.to("spyre")
    y = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    assert y.device == x.device and y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y.cpu(), cpu)
    y.fill_(1)  # the same memory
    assert torch.equal(x.cpu(), torch.ones_like(cpu))


def test_dlpack_of_permuted_view_and_lifetime():
    cpu = torch.randn(4, 6)
    x = cpu.to("spyre")
    torch.spyre.synchronize()
    base = torch.spyre.memory_allocated()
    t = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x.t()))
    assert t.shape == (6, 4)
    assert torch.equal(t.cpu(), cpu.t())
    assert torch.equal((t * 2).cpu(), cpu.t() * 2)
    del x  # the imported tensor keeps the storage alive
    assert torch.equal(t.cpu(), cpu.t())
    assert torch.spyre.memory_allocated() == base
    del t  # freed exactly once
    torch.spyre.synchronize()
    assert torch.spyre.memory_allocated() < base


def from_dlpack(tensor):
    return torch.from_dlpack(torch.utils.dlpack.to_dlpack(tensor))


VIEWS = {
    "rows": lambda t: t[1:],
    "prefix": lambda t: t[:2],
    "columns": lambda t: t[:, 2:5],
    "element": lambda t: t[2, 3],
    "transposed_rows": lambda t: t[1:].t(),
    "strided": lambda t: t[::2, 1::2],
    "flat_run": lambda t: t.view(-1)[7:20],
    "empty": lambda t: t[4:],
}


@pytest.mark.parametrize("dtype", DLPACK_DTYPES)
@pytest.mark.parametrize("view", VIEWS)
def test_dlpack_of_a_view_reads_and_computes_as_the_cpu(dtype, view):
    cpu = (torch.arange(4 * 6) % 7).reshape(4, 6).to(dtype)
    x = cpu.to("spyre")
    y = from_dlpack(VIEWS[view](x))
    expected = VIEWS[view](cpu)
    assert y.shape == expected.shape and y.dtype == dtype
    assert torch.equal(y.cpu(), expected)
    assert torch.equal((y == 3).cpu(), expected == 3)
    if dtype != torch.bool:
        assert torch.equal((y * 2).cpu(), expected * 2)


def test_dlpack_of_a_view_writes_only_its_elements_of_the_exporter():
    cpu = torch.randn(4, 64)
    x = cpu.to("spyre")
    rows = from_dlpack(x[1:3])
    rows.fill_(5.0)
    cpu[1:3] = 5.0
    rows.mul_(torch.arange(64.0, device="spyre"))
    cpu[1:3] *= torch.arange(64.0)
    block = from_dlpack(x[2:4, 10:20])
    block.copy_(torch.ones(2, 10))  # from the host
    cpu[2:4, 10:20] = 1.0
    torch.add(from_dlpack(x[0]), 1, out=from_dlpack(x[3]))
    cpu[3] = cpu[0] + 1
    assert torch.equal(x.cpu(), cpu)


def test_dlpack_of_a_view_is_seen_to_share_the_exporters_memory():
    # Different storages to PyTorch (is_alias_of is false), one allocation on
    # the device: an op reading one and writing the other overlapping it
    # reads a snapshot, as the CPU's own tensor would.
    x = torch.arange(10.0).to("spyre")
    cpu = torch.arange(10.0)
    x[1:].add_(from_dlpack(x[:-1]))
    cpu[1:] += cpu[:-1].clone()
    assert torch.equal(x.cpu(), cpu)


def test_dlpack_of_a_view_matmul_reduction_compile_and_reexport():
    cpu = torch.randn(8, 64)
    x = cpu.to("spyre")
    y = from_dlpack(x[2:6])
    weight = torch.randn(64, 16)
    torch.testing.assert_close((y @ weight.to("spyre")).cpu(), cpu[2:6] @ weight,
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y.sum(0).cpu(), cpu[2:6].sum(0), rtol=1e-5, atol=1e-5)
    compiled = torch.compile(lambda t: torch.relu(t) * 2 + 1)
    torch.testing.assert_close(compiled(y).cpu(), torch.relu(cpu[2:6]) * 2 + 1)
    again = from_dlpack(from_dlpack(x[1:])[2:])  # a view of an imported view
    assert torch.equal(again.cpu(), cpu[3:])


def test_dlpack_of_a_view_keeps_the_exporter_alive_and_frees_once():
    cpu = torch.randn(16, 32)
    x = cpu.to("spyre")
    torch.spyre.synchronize()
    base = torch.spyre.memory_allocated()
    y = from_dlpack(x[3:9, 4:])
    del x
    assert torch.equal(y.cpu(), cpu[3:9, 4:])
    assert torch.spyre.memory_allocated() == base
    del y
    torch.spyre.synchronize()
    assert torch.spyre.memory_allocated() < base


def test_dlpack_of_a_view_records_its_stream_on_the_shared_memory():
    cpu = torch.arange(65536.0)
    x = cpu.to("spyre")
    view = from_dlpack(x[1024:])
    side = torch.spyre.Stream()
    torch.spyre.synchronize()
    keep_busy(side)
    with torch.spyre.stream(side):
        doubled = view * 2
    view.record_stream(side)
    del x, view
    torch.full((65536,), -1.0, device="spyre")  # x's block, were it free
    side.synchronize()
    assert torch.equal(doubled.cpu(), cpu[1024:] * 2)


def test_dlpack_of_a_byte_view_reads_any_offset_and_refuses_a_split_element():
    cpu = torch.randn(40, 70)
    x = cpu.to("spyre")
    for start in (1, 3, 130, 1001):
        raw = from_dlpack(x.view(torch.uint8).view(-1)[start:start + 300])
        assert torch.equal(raw.cpu(), cpu.view(torch.uint8).view(-1)[start:start + 300])
    halves = from_dlpack(x.view(torch.int16)[3:, 5:])
    assert torch.equal(halves.cpu(), cpu.view(torch.int16)[3:, 5:])
    odd = from_dlpack(x.view(torch.uint8).view(-1)[1:9]).view(torch.float16)
    with pytest.raises(ValueError, match="inside a Half element"):
        odd.cpu()
    with pytest.raises(RuntimeError, match="not resizable"):
        from_dlpack(x[2:]).resize_(10_000)


# --- tensor metadata --------------------------------------------------------------------

def test_tensor_metadata_is_kept_and_serialised():
    x = torch.randn(3, device="spyre")
    torch._utils.set_tensor_metadata(x, {"a": 1, "b": False})
    assert torch._utils.get_tensor_metadata(x) == {"a": True, "b": False}
    torch._utils.set_tensor_metadata(x, {"c": True})
    assert torch._utils.get_tensor_metadata(x) == {"a": True, "b": False, "c": True}
    assert torch._utils.get_tensor_metadata(x.detach()) == {"a": True, "b": False, "c": True}
    buffer = io.BytesIO()
    torch.save(x, buffer)
    buffer.seek(0)
    y = torch.load(buffer)
    assert y.device.type == "spyre"
    assert torch.equal(y.cpu(), x.cpu())
    assert torch._utils.get_tensor_metadata(y) == {"a": True, "b": False, "c": True}
    # conj/neg stay PyTorch's own, as on the CPU.
    assert torch._utils.get_tensor_metadata(torch.randn(3, device="spyre")) == {}


# --- quantized tensors ---------------------------------------------------------------------

def test_quantize_on_spyre_is_a_clear_error():
    x = torch.randn(4, device="spyre")
    with pytest.raises(NotImplementedError, match="not supported on spyre; quantize on the CPU"):
        torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="quantize on the CPU"):
        torch.quantize_per_channel(x.reshape(2, 2), torch.ones(2, device="spyre"),
                                   torch.zeros(2, dtype=torch.long, device="spyre"),
                                   0, torch.qint8)
    q = torch.quantize_per_tensor(x.cpu(), 0.1, 0, torch.qint8)  # the advice works
    assert torch.allclose(q.dequantize(), x.cpu(), atol=0.05)


def test_a_quantized_tensor_on_spyre_is_a_clear_error_by_any_route():
    # PyTorch's own view tests make one with _empty_affine_quantized; a
    # quantized CPU tensor moved over reaches empty_quantized
    with pytest.raises(NotImplementedError,
                       match="_empty_affine_quantized: quantized tensors are not supported"):
        torch._empty_affine_quantized([2, 3], scale=0.1, zero_point=0, dtype=torch.quint8,
                                      device="spyre")
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="quantized tensors are not supported on spyre"):
        q.to("spyre")


# --- recurrent layers -------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_match_cpu(kind):
    torch.manual_seed(4)
    layer = getattr(torch.nn, kind)(8, 4, num_layers=2, batch_first=True)
    x = torch.randn(2, 3, 8)
    expected, expected_state = layer(x)
    spyre_layer = layer.to("spyre")
    out, state = spyre_layer(x.to("spyre"))
    _close(out, expected.detach())
    if kind == "LSTM":
        _close(state[0], expected_state[0].detach())
        _close(state[1], expected_state[1].detach())
    else:
        _close(state, expected_state.detach())


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_backward_matches_cpu(kind):
    torch.manual_seed(5)
    cpu_layer = getattr(torch.nn, kind)(6, 3)
    spyre_layer = getattr(torch.nn, kind)(6, 3)
    spyre_layer.load_state_dict(cpu_layer.state_dict())
    spyre_layer.to("spyre")
    x = torch.randn(2, 1, 6)
    cpu_layer(x)[0].sum().backward()
    spyre_layer(x.to("spyre"))[0].sum().backward()
    for (name, p_cpu), p_spyre in zip(cpu_layer.named_parameters(), spyre_layer.parameters()):
        _close(p_spyre.grad, p_cpu.grad)


def test_lstm_and_gru_cells_match_cpu():
    torch.manual_seed(6)
    lstm, gru = torch.nn.LSTMCell(5, 3), torch.nn.GRUCell(5, 3)
    x, h, c = torch.randn(2, 5), torch.randn(2, 3), torch.randn(2, 3)
    hy, cy = lstm(x, (h, c))
    gy = gru(x, h)
    s = lambda t: t.to("spyre")  # noqa: E731
    lstm.to("spyre"), gru.to("spyre")
    with torch.no_grad():
        shy, scy = lstm(s(x), (s(h), s(c)))
        sgy = gru(s(x), s(h))
    _close(shy, hy.detach())
    _close(scy, cy.detach())
    _close(sgy, gy.detach())


# --- per-device random state ------------------------------------------------------------------

@needs_two_devices()
def test_per_device_rng_state():
    torch.spyre.manual_seed_all(1)
    # As torch.cuda: one seed for all devices gives every device the same state.
    assert torch.equal(torch.spyre.get_rng_state(0), torch.spyre.get_rng_state(1))
    with torch.spyre.device(1):
        torch.spyre.manual_seed(2)  # the current device only
    assert torch.spyre.initial_seed() == 1
    s0, s1 = torch.spyre.get_rng_state(0), torch.spyre.get_rng_state("spyre:1")
    assert not torch.equal(s0, s1)
    assert torch.equal(s1, torch.spyre.get_rng_state(torch.device("spyre", 1)))
    a = torch.rand(50, device="spyre:1")
    torch.spyre.set_rng_state(s1, 1)
    assert torch.equal(torch.rand(50, device="spyre:1").cpu(), a.cpu())
    # Drawing on device 1 left device 0's state alone.
    assert torch.equal(torch.spyre.get_rng_state(0), s0)
    torch.spyre.manual_seed_all(1)


# --- scaled dot-product attention ------------------------------------------------------------

def _qkv(batch=2, heads=4, kv_heads=4, length=5, source=7, dim=8, seed=7):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, length, dim, generator=g),
            torch.randn(batch, kv_heads, source, dim, generator=g),
            torch.randn(batch, kv_heads, source, dim, generator=g))


def test_sdpa_selects_the_overrideable_backend():
    q, k, v = (t.to("spyre") for t in _qkv())
    assert torch._fused_sdp_choice(q, k, v) == torch._C._SDPBackend.OVERRIDEABLE.value
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v)
    masked = torch.ones(5, 7, dtype=torch.bool, device="spyre")
    masked[1] = False
    direct = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, masked)
    assert torch.equal(direct[0][:, :, 1].cpu(), torch.zeros(2, 4, 8))
    cpu = F.scaled_dot_product_attention(*_qkv())
    _close(out[0], cpu)
    # The row logsumexp (float32) the fused kernels return.
    qc, kc, _ = _qkv()
    lse = torch.logsumexp((qc @ kc.transpose(-2, -1)) / 8 ** 0.5, -1)
    _close(out[1], lse)


@pytest.mark.parametrize("case", ["plain", "float_mask", "bool_mask", "causal",
                                  "causal_square", "gqa", "scale", "masked_row"])
def test_sdpa_forward_matches_cpu(case):
    q, k, v = _qkv(kv_heads=2 if case == "gqa" else 4,
                   source=5 if case == "causal_square" else 7)
    kwargs = {}
    if case == "float_mask":
        kwargs["attn_mask"] = torch.randn(5, 7)
    elif case == "bool_mask":
        mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 0] = True  # no row fully masked
        kwargs["attn_mask"] = mask
    elif case.startswith("causal"):
        kwargs["is_causal"] = True
    elif case == "gqa":
        kwargs["enable_gqa"] = True
    elif case == "scale":
        kwargs["scale"] = 0.3
    elif case == "masked_row":  # a query that may attend to nothing: zeros
        mask = torch.ones(5, 7, dtype=torch.bool)
        mask[2] = False
        kwargs["attn_mask"] = mask
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    spyre_kwargs = {n: (t.to("spyre") if isinstance(t, torch.Tensor) else t)
                    for n, t in kwargs.items()}
    out = F.scaled_dot_product_attention(q.to("spyre"), k.to("spyre"), v.to("spyre"),
                                         **spyre_kwargs)
    _close(out, expected)


def test_sdpa_backward_matches_cpu():
    grads = {}
    for device in ("cpu", "spyre"):
        q, k, v = (t.to(device).requires_grad_() for t in _qkv(kv_heads=2))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        (out * torch.arange(8.0, device=device)).sum().backward()
        grads[device] = [t.grad for t in (q, k, v)]
    for spyre_grad, cpu_grad in zip(grads["spyre"], grads["cpu"]):
        _close(spyre_grad, cpu_grad)


def test_sdpa_gqa_without_enable_gqa_is_pytorchs_error():
    q, k, v = (t.to("spyre") for t in _qkv(kv_heads=2))
    with pytest.raises(RuntimeError, match="must match the size"):
        F.scaled_dot_product_attention(q, k, v)


def test_autocast_backward_matches_cpu_autocast():
    grads = {}
    for device in ("cpu", "spyre"):
        torch.manual_seed(8)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4)).to(device)
        x = torch.randn(8, 16).to(device)
        with torch.autocast(device, dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out, torch.arange(8, device=device) % 4)
        assert out.dtype == torch.float16 and loss.dtype == torch.float32
        loss.backward()
        grads[device] = [p.grad for p in model.parameters()]
    for spyre_grad, cpu_grad in zip(grads["spyre"], grads["cpu"]):
        assert spyre_grad.dtype == torch.float32
        _close(spyre_grad, cpu_grad, atol=1e-2, rtol=1e-2)
