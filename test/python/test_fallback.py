"""The CPU fallback: counted per op, warned once, strict mode."""

import warnings

import pytest
import torch


def test_fallback_is_counted_per_op():
    torch.spyre.reset_fallback_stats()
    a = torch.randn(4, 70).to("spyre")
    b = torch.randn(4, 70).to("spyre")
    for _ in range(3):
        c = torch.atan2(a, b)  # an op with no spyre kernel
    d = torch.cumprod(a, 1)  # another
    stats = torch.spyre.fallback_stats()
    assert stats["aten::atan2.out"] == 3
    assert stats["aten::cumprod.out"] == 1
    assert torch.allclose(c.cpu(), torch.atan2(a.cpu(), b.cpu()))
    assert torch.allclose(d.cpu(), torch.cumprod(a.cpu(), 1), atol=1e-5)
    torch.spyre.reset_fallback_stats()
    assert torch.spyre.fallback_stats() == {}


def test_native_ops_are_not_fallbacks():
    torch.spyre.reset_fallback_stats()
    x = torch.randn(5, 130).to("spyre")
    y = torch.empty_like(x).copy_(x)
    y[1:3].fill_(1.0)
    y.zero_()
    v = x.t()[3:5].view(-1) if x.t()[3:5].is_contiguous() else x[2].view(13, 10)
    _ = v.cpu(), x[1, 2].item(), x.clone(), x.reshape(-1), x.to("spyre:0")
    assert torch.spyre.fallback_stats() == {}


def test_warned_once_per_op():
    torch.spyre.reset_fallback_stats()
    x = torch.randn(8).to("spyre")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x.sinh()
        x.sinh()
        x.sinh()
    messages = [str(w.message) for w in caught if "sinh" in str(w.message)]
    assert len(messages) == 1 and "no spyre kernel" in messages[0]


def test_a_dtype_without_kernels_is_warned_about_once_by_dtype(fresh_python):
    # Printing converts to float64, which the device cannot compute: one
    # warning naming the dtype, not one per float64 operator it goes through.
    result = fresh_python("""
        import warnings, torch
        x = torch.tensor([1.5, -2.0, 3.25]).to("spyre")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            text = str(x)
            y = x.double() * 3 + 1
        messages = [str(w.message) for w in caught if "spyre" in str(w.message)]
        print("warnings", len(messages))
        print("names dtype", all("Double" in m and "float32" in m for m in messages))
        print("values", text.startswith("tensor([ 1.5000, -2.0000,  3.2500]"),
              torch.equal(y.cpu(), x.cpu().double() * 3 + 1))
        print("counted", torch.spyre.fallback_stats().get("aten::mul.Tensor", 0) >= 1)
    """)
    assert result.returncode == 0, result.stderr
    assert "warnings 1" in result.stdout
    assert "names dtype True" in result.stdout
    assert "values True True" in result.stdout
    assert "counted True" in result.stdout


def test_strict_toggle():
    x = torch.randn(8).to("spyre")
    with torch.spyre.strict():
        assert torch.spyre.is_strict()
        with pytest.raises(RuntimeError, match="strict mode forbids"):
            x.cosh()
        assert torch.equal(x.clone().cpu(), x.cpu())  # native ops still work
    assert not torch.spyre.is_strict()
    assert torch.allclose(x.cosh().cpu(), x.cpu().cosh())


def test_strict_from_environment(fresh_python):
    result = fresh_python("""
        import torch
        assert torch.spyre.is_strict()
        x = torch.ones(4).to("spyre")
        try:
            x.asinh()
        except RuntimeError as error:
            print("refused:", "aten::asinh" in str(error))
    """, SPYRE_STRICT="1")
    assert result.returncode == 0, result.stderr
    assert "refused: True" in result.stdout


def test_strict_environment_spellings(fresh_python):
    # false/off must not turn strict mode on; a typo is a clear error.
    for value, strict in [("true", True), ("ON", True), ("yes", True), ("false", False),
                          ("off", False), ("0", False), ("no", False)]:
        result = fresh_python("import torch; print(torch.spyre.is_strict())",
                              SPYRE_STRICT=value)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(strict), value
    result = fresh_python("import torch; torch.spyre.is_strict()", SPYRE_STRICT="maybe")
    assert result.returncode != 0
    assert "SPYRE_STRICT='maybe' is not a boolean" in result.stderr


def _out_view_cases():
    # (name, run(x, out) with x the inputs on the out's device, out shape)
    return [
        ("exp2", lambda x, out: torch.exp2(x[:, :2], out=out), (4, 2)),
        ("atan2", lambda x, out: torch.atan2(x[:, :2], x[:, 2:4], out=out), (4, 2)),
        ("cumsum", lambda x, out: torch.cumsum(x[:, :2], 1, out=out), (4, 2)),
        ("linspace", lambda x, out: torch.linspace(0, 1, 4, out=out), (4,)),
        ("logspace", lambda x, out: torch.logspace(0, 1, 4, out=out), (4,)),
        ("std.out", lambda x, out: torch.std(x, 1, out=out), (4,)),
        ("prod.out", lambda x, out: torch.prod(x, 1, out=out), (4,)),
    ]


def test_fallback_out_into_a_view_writes_only_the_view():
    # The fallback copies its CPU result back with _copy_from_and_resize,
    # whose resize_ restrided the view to contiguous: a column view was
    # written as if contiguous, over elements outside it (issue 16).
    x = torch.rand(4, 5) + 0.5
    for name, run, shape in _out_view_cases():
        base_cpu = torch.zeros(4, 5)
        base = base_cpu.to("spyre")
        if len(shape) == 2:
            view, view_cpu = base[:, 1:3], base_cpu[:, 1:3]  # rows 5 apart
        else:
            view, view_cpu = base[:, 1], base_cpu[:, 1]      # a column
        run(x.to("spyre"), view)
        run(x, view_cpu)
        torch.testing.assert_close(base.cpu(), base_cpu, msg=name)


def test_mode_out_into_views_runs_through_the_fallback():
    # mode.values' own CompositeExplicitAutograd kernel refuses spyre tensors
    # ("mode only supports CPU, CUDA and XPU"): it goes to the fallback.
    x = torch.randint(0, 3, (4, 6), generator=torch.Generator().manual_seed(1)).float()
    values, indices = torch.zeros(4, 3), torch.zeros(4, 3, dtype=torch.long)
    values_s, indices_s = values.to("spyre"), indices.to("spyre")
    torch.mode(x, 1, out=(values[:, 1], indices[:, 1]))
    torch.mode(x.to("spyre"), 1, out=(values_s[:, 1], indices_s[:, 1]))
    assert torch.equal(values_s.cpu(), values)
    assert torch.equal(indices_s.cpu(), indices)


def test_convolution_runs_through_the_counted_fallback():
    # spyre's convolution dispatches to convolution_overrideable, which the
    # CPU has no kernel for: the convolutions the device does not compute
    # (transposed ones, three spatial dims) run aten::convolution on the CPU.
    torch.spyre.reset_fallback_stats()
    for conv, shape in [(torch.nn.ConvTranspose1d(4, 6, 3, padding=1), (2, 4, 10)),
                        (torch.nn.Conv3d(2, 3, 2), (1, 2, 4, 4, 4))]:
        x = torch.randn(shape)
        want = conv(x)
        got = conv.to("spyre")(x.to("spyre"))
        assert got.device.type == "spyre"
        assert torch.allclose(got.cpu(), want, atol=1e-5)
    assert torch.spyre.fallback_stats() == {"aten::convolution": 2}
    torch.spyre.reset_fallback_stats()


def test_operands_of_storage_only_dtypes_give_the_cpu_result():
    # int16 lives in device memory but the device does not compute with it:
    # int16 + int32 is the CPU's result (through the counted fallback), not
    # an internal assert.
    torch.spyre.reset_fallback_stats()
    a = torch.arange(-5, 5, dtype=torch.int16)
    b = torch.arange(10, dtype=torch.int32) * 1000
    for x, y in [(a, b), (b, a)]:
        assert torch.equal((x.to("spyre") + y.to("spyre")).cpu(), x + y)
        assert torch.equal((x.to("spyre") - y.to("spyre")).cpu(), x - y)
    assert set(torch.spyre.fallback_stats()) == {"aten::add.Tensor", "aten::sub.Tensor"}
