"""A sentence-transformers model's prompts and similarity function survive every output, and are used as its
users use them: e5/bge-style prompts (``encode(..., prompt_name="query")``), dot-product models without
normalisation (msmarco "-dot" models), and the folders that cannot work (no tokenizer, a pooling we do not run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from espresso_export.cli.app import main

PROMPTS = {"query": "query: ", "passage": "passage: "}
TEXTS = ["A man is playing a guitar.", "The cat sleeps on the warm windowsill.", "Stock markets fell sharply today."]


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def st_models(tmp_path_factory, tiny_bert):
    """Two sentence-transformers folders on the tiny BERT: e5-style prompts with a default prompt and Normalize
    (similarity dot, as e5 declares on unit vectors); a dot-product model with a Dense head and no Normalize."""
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers builds the folders")
    import torch
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer

    root = tmp_path_factory.mktemp("st-usage")
    dim = json.loads((tiny_bert / "config.json").read_text())["hidden_size"]
    torch.manual_seed(0)
    e5 = st.SentenceTransformer(modules=[Transformer(str(tiny_bert), max_seq_length=48), Pooling(dim, "mean"),
                                         Normalize()],
                                prompts=PROMPTS, default_prompt_name="query", similarity_fn_name="dot", device="cpu")
    e5.save(str(root / "e5"))
    dot = st.SentenceTransformer(modules=[Transformer(str(tiny_bert)), Pooling(dim, "cls"),
                                          Dense(dim, 16, activation_function=torch.nn.Tanh())],
                                 similarity_fn_name="dot", device="cpu")
    dot.save(str(root / "dot"))
    return {"e5": root / "e5", "dot": root / "dot"}


def _st(folder: Path, **kwargs):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", **kwargs)


def test_prompts_and_similarity_survive_shrink_and_export(st_models, tmp_path, capsys):
    # every output said prompts {}, default None, similarity cosine: encode(prompt_name="passage") raised and the
    # default "query: " prompt was silently gone (cosine 0.98 to the source's vectors at full depth and width)
    from espresso_export.runtime import OnnxEncoder

    src = st_models["e5"]
    full, onnx = tmp_path / "full", tmp_path / "onnx"
    assert run(capsys, "shrink", src, "--layers", "4", "-o", full)[0] == 0  # every layer, full width: the same model
    code, out, err = run(capsys, "export", src, "-o", onnx, "--quantize", "none", "--timing-batches", "none",
                         "--threads", "1")
    assert code == 0, err
    declared = json.loads((src / "config_sentence_transformers.json").read_text())  # PROMPTS (+ "document": "")
    assert declared["prompts"].items() >= PROMPTS.items()
    for folder in (full, onnx):
        cfg = json.loads((folder / "config_sentence_transformers.json").read_text())
        assert cfg["prompts"] == declared["prompts"] and cfg["default_prompt_name"] == "query"
        assert cfg["similarity_fn_name"] == "dot"
    source, copy = _st(src), _st(full)
    for kwargs in ({}, {"prompt_name": "passage"}, {"prompt_name": "query"}):
        np.testing.assert_allclose(copy.encode(TEXTS, **kwargs), source.encode(TEXTS, **kwargs), atol=1e-5)
    enc = OnnxEncoder(onnx)
    assert enc.prompts == declared["prompts"] and enc.similarity_fn_name == "dot" and enc.normalized
    np.testing.assert_allclose(enc.encode(TEXTS), source.encode(TEXTS), atol=1e-4)  # the default prompt
    np.testing.assert_allclose(enc.encode(TEXTS, prompt_name="passage"), source.encode(TEXTS, prompt_name="passage"),
                               atol=1e-4)
    np.testing.assert_allclose(enc.encode_query(TEXTS), source.encode_query(TEXTS), atol=1e-4)
    np.testing.assert_allclose(enc.encode_document(TEXTS), source.encode_document(TEXTS), atol=1e-4)
    np.testing.assert_allclose(enc.encode(TEXTS, prompt=""), source.encode(TEXTS, prompt=""), atol=1e-4)
    with pytest.raises(Exception, match="prompt 'doc' is not one of the model's prompts"):
        enc.encode(TEXTS, prompt_name="doc")


def test_verify_encodes_as_the_models_users_do(st_models, tmp_path, capsys):
    # verify scored the source without its default prompt: 47.87 where sentence-transformers' encode gives 46.90
    from scipy.stats import spearmanr

    from espresso_export.data import builtin_resource, read_sts

    src = st_models["e5"]
    code, out, err = run(capsys, "verify", src, "--against", src, "--batch-sizes", "none", "--json", "-")
    assert code == 0, err
    report = json.loads(out)
    measured = report["sts"]["sets"][0]["source_spearman"]
    pairs = read_sts(builtin_resource("sts_smoke.tsv"))
    model = _st(src)
    a, b = model.encode(pairs.sentence1), model.encode(pairs.sentence2)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert measured == pytest.approx(100 * spearmanr(cos, pairs.scores).statistic, abs=0.01)


def test_a_dot_product_model_keeps_its_vector_lengths(st_models, tmp_path, capsys):
    # the export normalised every graph's output (export.json "normalize": true) while modules.json had no
    # Normalize: OnnxEncoder's dot products were cosines, and the ranking of a dot-product model changed
    from espresso_export.runtime import OnnxEncoder

    src, onnx = st_models["dot"], tmp_path / "onnx"
    code, out, err = run(capsys, "export", src, "-o", onnx, "--quantize", "none", "--timing-batches", "none",
                         "--threads", "1")
    assert code == 0, err
    info = json.loads((onnx / "export.json").read_text())
    assert info["normalize"] is False and info["similarity_fn_name"] == "dot"
    enc, source = OnnxEncoder(onnx), _st(src)
    assert not enc.normalized
    np.testing.assert_allclose(enc.encode(TEXTS), source.encode(TEXTS), atol=1e-4)  # lengths and all
    assert not np.allclose(np.linalg.norm(enc.encode(TEXTS), axis=1), 1.0)


def test_folders_that_cannot_work_are_refused_with_the_reason(tiny_bert, st_models, tmp_path, capsys):
    # no tokenizer files: transformers built an empty 5-token tokenizer, every word became [UNK], exit 0
    bare = tmp_path / "no-tokenizer"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_bert / name, bare / name)
    code, out, err = run(capsys, "shrink", bare, "--layers", "2", "-o", tmp_path / "x")
    assert code == 2 and "tokens for an embedding table of" in err and "tokenizer files" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()

    # a pooling we do not run: the mode named (not the config's raw dict), and --pooling picks another
    weighted = shutil.copytree(st_models["e5"], tmp_path / "weighted")
    pooling = json.loads((weighted / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_weightedmean_tokens=True)
    pooling.pop("pooling_mode", None)
    (weighted / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    code, out, err = run(capsys, "shrink", weighted, "--layers", "2", "-o", tmp_path / "w")
    assert code == 2 and "unsupported pooling mode weightedmean_tokens (supported: cls, mean" in err and "{" not in err
    assert run(capsys, "shrink", weighted, "--layers", "2", "--pooling", "mean", "-o", tmp_path / "w")[0] == 0

    # a config.json without model_type: said so, not "unsupported architecture None"
    untyped = shutil.copytree(tiny_bert, tmp_path / "untyped")
    cfg = json.loads((untyped / "config.json").read_text())
    cfg.pop("model_type")
    cfg.pop("architectures", None)
    (untyped / "config.json").write_text(json.dumps(cfg))
    code, out, err = run(capsys, "export", untyped, "-o", tmp_path / "u")
    assert code == 2 and "config.json has no model_type" in err and "None" not in err


def test_retrieval_ranks_a_dot_product_model_by_its_dot_product():
    pytest.importorskip("faiss", reason="retrieval needs faiss")
    from espresso_export.verification.retrieval import IndexOptions, search

    query = np.array([[1.0, 0.0]], dtype=np.float32)
    docs = np.array([[0.5, 0.0], [0.9, 0.9]], dtype=np.float32)  # cosine: doc 0 (1.0 vs 0.71); dot: doc 1 (0.9 vs 0.5)
    assert search(query, docs, IndexOptions(), k=2)[0][0].tolist() == [0, 1]
    assert search(query, docs, IndexOptions(), k=2, similarity="dot")[0][0].tolist() == [1, 0]


def test_a_checkpoint_missing_a_layers_weights_is_refused(tiny_bert, tmp_path, capsys):
    # transformers filled the missing layer with random weights (its warning silenced): cut and exported, exit 0
    from safetensors.torch import load_file, save_file

    broken = Path(shutil.copytree(tiny_bert, tmp_path / "broken"))
    tensors = load_file(str(tiny_bert / "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if "layer.3." not in k}, str(broken / "model.safetensors"))
    code, out, err = run(capsys, "shrink", broken, "--layers", "4", "-o", tmp_path / "x")
    assert code == 2 and "lack" in err and "tensors the model needs" in err and "layer.3." in err
    assert not (tmp_path / "x").exists()
