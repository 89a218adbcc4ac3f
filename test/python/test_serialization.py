"""torch.save / torch.load of spyre tensors."""

import io

import torch


def round_trip(obj, **load_args):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_args)


def test_tensor_round_trip_stays_on_spyre():
    x = torch.randn(3, 130).half()
    loaded = round_trip(x.to("spyre"))
    assert loaded.device.type == "spyre" and loaded.dtype == torch.float16
    assert torch.equal(loaded.cpu(), x)


def test_map_location_cpu():
    x = torch.randn(7, 9)
    loaded = round_trip({"w": x.to("spyre"), "n": 3}, map_location="cpu")
    assert loaded["w"].device.type == "cpu" and loaded["n"] == 3
    assert torch.equal(loaded["w"], x)


def test_views_keep_sharing_storage():
    base = torch.arange(600.0).reshape(6, 100).to("spyre")
    a, b = base[1:3], base[:, 50:]
    la, lb = round_trip((a, b))
    assert la.untyped_storage().data_ptr() == lb.untyped_storage().data_ptr()
    assert la.storage_offset() == a.storage_offset()
    assert torch.equal(la.cpu(), a.cpu()) and torch.equal(lb.cpu(), b.cpu())


def test_module_state_dict_and_map_location_to_spyre():
    model = torch.nn.Linear(5, 3)
    loaded = round_trip(model.state_dict(), map_location="spyre")
    assert all(t.device.type == "spyre" for t in loaded.values())
    assert torch.equal(loaded["weight"].cpu(), model.weight.detach())


def test_int64_and_bool():
    x = torch.arange(-5, 300)
    m = x > 7
    lx, lm = round_trip((x.to("spyre"), m.to("spyre")))
    assert torch.equal(lx.cpu(), x) and torch.equal(lm.cpu(), m)
