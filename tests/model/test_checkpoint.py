"""Checkpoint loading: folders, sentence-transformers module chains, pooling detection, bad checkpoints."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from espresso_export.model.checkpoint import DenseLayer, Normalize, load, resolve
from espresso_export.model.embed import encode
from espresso_export.core.errors import CorruptCheckpointError, NotFoundError, OfflineError, UnsupportedModelError, ValidationError
from espresso_export.core.types import Pooling

TEXTS = ["the dog runs", "a small red car in the city", "music"]


@pytest.fixture
def st_folder(tiny_bert, tmp_path):
    """A sentence-transformers folder with CLS pooling, a Tanh Dense and Normalize, saved by sentence-transformers."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.models import Dense, Normalize as StNormalize, Pooling as StPooling, Transformer

    import torch

    torch.manual_seed(0)
    word = Transformer(str(tiny_bert))
    modules = [word, StPooling(32, "cls"),
               Dense(32, 16, activation_function=torch.nn.Tanh()), StNormalize()]
    model = st.SentenceTransformer(modules=modules, device="cpu")
    out = tmp_path / "st"
    model.save(str(out))
    return out, model


def test_sentence_transformers_folder_with_dense_and_normalize(st_folder):
    folder, model = st_folder
    ckpt = load(folder)
    assert ckpt.pooling is Pooling.CLS
    assert [type(m) for m in ckpt.post] == [DenseLayer, Normalize]
    assert ckpt.output_dim == 16 and ckpt.post[0].activation.endswith("Tanh")
    np.testing.assert_allclose(encode(ckpt, TEXTS), model.encode(TEXTS, convert_to_numpy=True), atol=1e-5)


def test_pooling_override(st_folder):
    assert load(st_folder[0], pooling="mean").pooling is Pooling.MEAN


def test_plain_transformers_folder_defaults(tiny_models):
    assert load(tiny_models["bert"]).pooling is Pooling.MEAN
    assert load(tiny_models["qwen2"]).pooling is Pooling.LAST_TOKEN
    assert load(tiny_models["bert"]).post == []


def test_packaged_minilm_alias_offline(minilm_path):
    source, folder = resolve("minilm")
    assert source == "sentence-transformers/all-MiniLM-L6-v2" and folder == minilm_path
    ckpt = load("sentence-transformers/all-MiniLM-L6-v2")
    assert ckpt.depth == 6 and ckpt.hidden_size == 384 and ckpt.pooling is Pooling.MEAN


def test_missing_path_says_not_found(tmp_path):
    with pytest.raises(NotFoundError, match="not found"):
        load(tmp_path / "nope")
    with pytest.raises(NotFoundError, match="not found"):
        load("model/")
    with pytest.raises(NotFoundError, match="not found"):
        load("justaword")


def test_a_mistyped_path_under_a_local_folder_is_not_sent_to_the_hub(tmp_path, monkeypatch):
    """``out/nothing`` has the form of a Hub id; with ``out/`` here it is a typo of a path: exit 2, no download."""
    from espresso_export.data.hub_datasets import hub_dataset

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "out").mkdir()
    with pytest.raises(NotFoundError, match="no folder 'out/nothing' exists \\(read as a path"):
        load("out/nothing")
    assert hub_dataset("out/beir-set") is None  # a retrieval folder's typo likewise
    assert hub_dataset("owner/dataset") is not None  # no local folder "owner": still a Hub id
    with pytest.raises(OfflineError, match="unreachable"):
        load("elsewhere/model")


def test_hub_id_offline_gives_one_clear_sentence(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError, match="unreachable"):
        load("some-owner/some-model-that-is-not-cached")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("hi")
    with pytest.raises(ValidationError, match="not a model folder"):
        load(tmp_path / "x")
    with pytest.raises(ValidationError, match="is a file"):
        load(tmp_path / "x" / "notes.txt")


def test_unsupported_architecture_lists_supported(tiny_bert, tmp_path):
    folder = _copy(tiny_bert, tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "t5"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="supported model types: .*bert.*mpnet.*qwen2"):
        load(folder)


def test_truncated_safetensors_named(tiny_bert, tmp_path):
    folder = _copy(tiny_bert, tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        load(folder)


def test_garbage_safetensors_named(tiny_bert, tmp_path):
    folder = _copy(tiny_bert, tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        load(folder)


def test_nan_weights_refused(tiny_bert, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy(tiny_bert, tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    name = next(k for k in state if k.endswith("weight") and state[k].ndim == 2)
    state[name][0, 0] = float("nan")
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CorruptCheckpointError, match="NaN or Inf"):
        load(folder)


def test_pickle_only_checkpoint_refused(tiny_bert, tmp_path):
    folder = _copy(tiny_bert, tmp_path / "m")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(UnsupportedModelError, match="pickle"):
        load(folder)


def test_saved_tokenizer_does_not_depend_on_earlier_calls(minilm_path, tmp_path):
    """Encoding with other truncation and padding settings changes a fast tokenizer's state, and save_pretrained
    writes that state: a resumed distill (fewer calls) wrote other tokenizer.json bytes than an uninterrupted one.
    The folder written truncates at the model's max_seq_length and pads to a batch's longest text whatever was
    called before."""
    from espresso_export.model.save import save_checkpoint

    written = {}
    for name, calls in (("fresh", False), ("used", True)):
        ckpt = load(minilm_path)
        ckpt.max_seq_length = 96
        if calls:
            ckpt.tokenizer(TEXTS, truncation=True, max_length=5, padding=True)
            encode(ckpt, TEXTS, batch_size=2)
        save_checkpoint(ckpt, tmp_path / name, post=ckpt.post, provenance={})
        written[name] = json.loads((tmp_path / name / "tokenizer.json").read_text())
    assert written["fresh"] == written["used"]
    assert written["fresh"]["truncation"]["max_length"] == 96
    assert written["fresh"]["padding"]["strategy"] == "BatchLongest"  # the source pads to a fixed 128
