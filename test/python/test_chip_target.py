"""One source of chip facts: on an emulated chip with 8 cores and 1 MiB of
scratchpad per core (SPYRE_SIM_CORES, SPYRE_SIM_SCRATCHPAD_KIB), eager ops
and compiled kernels are planned for that chip (no core beyond the eighth is
busy) and still give the CPU's results. A planner that kept its own figure
(32 cores, 2 MiB) would build programs the device rejects."""

CHILD = """
import torch, torch_spyre  # noqa: F401
props = torch.spyre.get_device_properties()
assert (props.num_cores, props.scratchpad_bytes) == (8, 1 << 20), props

def busy_cores():
    torch.spyre.synchronize()
    busy = torch.spyre.last_launch_stats()["core_busy_cycles"]
    assert len(busy) == 8, busy
    return sum(1 for c in busy if c)

torch.manual_seed(0)
x = torch.randn(1024, 512)
w = torch.randn(512, 256)
d = x.to("spyre")
checks = {
    "softmax": (lambda t: torch.softmax(t, -1), (x,)),
    "sum": (lambda t: t.sum(0), (x,)),
    "layer_norm": (lambda t: torch.nn.functional.layer_norm(t, (512,)), (x,)),
    "mm": (lambda a, b: a @ b, (x, w)),
    "exp": (torch.exp, (x,)),
}
for name, (fn, args) in checks.items():
    got = fn(*[a.to("spyre") for a in args])
    cores = busy_cores()
    assert cores >= 2, (name, cores)
    torch.testing.assert_close(got.cpu(), fn(*args), rtol=2e-3, atol=2e-3,
                               msg=lambda m: f"{name}: {m}")

compiled = torch.compile(lambda t: torch.softmax(t * 2 + 1, -1).sum(-1))
got = compiled(d)
busy_cores()
torch.testing.assert_close(got.cpu(), torch.softmax(x * 2 + 1, -1).sum(-1),
                           rtol=2e-3, atol=2e-3)
print("ok")
"""


def test_programs_are_planned_for_the_devices_chip(fresh_python):
    out = fresh_python(CHILD, SPYRE_SIM_CORES=8, SPYRE_SIM_SCRATCHPAD_KIB=1024)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip().endswith("ok")


def test_a_bad_chip_variant_is_a_clear_error(fresh_python):
    out = fresh_python("import torch, torch_spyre; torch.ones(1, device='spyre')",
                       SPYRE_SIM_CORES=0)
    assert out.returncode != 0
    assert "SPYRE_SIM_CORES" in out.stderr
