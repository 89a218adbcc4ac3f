"""out= tensors that share memory with an input: where PyTorch's CPU kernels
refuse the overlap, spyre raises the same error; where the CPU computes in
place and its result depends on its loop order (a matrix product into one
of its factors, a reduction into a column of its input), spyre raises a
clear error instead of returning another result; where the overlap is
well defined (addmm into its own bias, in-place ops on the same view),
spyre returns the CPU's result."""

import pytest
import torch

from ops_testing import no_fallbacks

OVERLAP = "unsupported operation|shares memory with an input"


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    yield


def test_refused_as_on_the_cpu():
    def cases(device):
        x = torch.arange(10.0).to(device)
        y = torch.ones(8).to(device)
        m = torch.randn(6, 40).to(device)
        idx = torch.tensor([1, 0, 2]).to(device)
        return [
            lambda: x[1:].copy_(x[:-1]),
            lambda: x.__setitem__(slice(2, 6), x[0:4]),
            lambda: torch.cat([x[:4], y[:4]], out=x[:8]),
            lambda: torch.index_select(m, 0, idx, out=m[2:5]),
            lambda: torch.ones(3).to(device).expand(2, 3).copy_(torch.zeros(2, 3).to(device)),
        ]
    for cpu_case, spyre_case in zip(cases("cpu"), cases("spyre")):
        with pytest.raises(RuntimeError, match="unsupported operation"):
            cpu_case()
        with pytest.raises(RuntimeError, match="unsupported operation"):
            spyre_case()


def test_order_dependent_cpu_results_are_refused():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    x, y = a.to("spyre"), b.to("spyre")
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch.mm(x, y, out=x)
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch.addmm(torch.randn(8, 8).to("spyre"), x, y, out=x)
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch.bmm(x[None], y[None], out=y[None])
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch.sum(x, 1, out=x[:, 0])
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch.amax(x, 0, out=x[0])
    with pytest.raises(RuntimeError, match=OVERLAP):
        torch._softmax(x, 1, False, out=x[2:])
    # Nothing was written: the inputs are as they were.
    assert torch.equal(x.cpu(), a) and torch.equal(y.cpu(), b)


def test_well_defined_overlaps_match_the_cpu():
    bias, m1, m2 = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8)
    b = bias.to("spyre")
    torch.addmm(b, m1.to("spyre"), m2.to("spyre"), out=b)  # addmm_
    want = bias.clone()
    torch.addmm(want, m1, m2, out=want)
    torch.testing.assert_close(b.cpu(), want, rtol=1e-4, atol=1e-4)
    x = torch.randn(8, 40)
    d = x.to("spyre")
    d[2:5].mul_(2)  # in place on one view
    want = x.clone()
    want[2:5].mul_(2)
    assert torch.equal(d.cpu(), want)
    s = x.to("spyre")
    out = torch.empty(8).to("spyre")
    torch.sum(s, 1, out=out)  # a separate out
    torch.testing.assert_close(out.cpu(), x.sum(1), rtol=1e-5, atol=1e-5)
    soft = x.to("spyre")
    torch._softmax(soft, 1, False, out=soft)  # in place, row by row
    torch.testing.assert_close(soft.cpu(), torch.softmax(x, 1), rtol=1e-5, atol=1e-6)
    x.copy_(x)  # the same view: a no-op on both
    d.copy_(d)
    no_fallbacks()
