"""``distill --student static``: model2vec's distillation of a tiny model, healed on a corpus against the teacher
cache's vectors; the folder loads in model2vec and sentence-transformers and reads as the project encodes it."""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import MissingExtraError, require

_WORDS = ("the a dog cat man woman child car house tree runs walks eats sleeps big small red blue green happy "
          "sad city river music food water book school computer phone guitar piano football").split()


def _texts(n: int, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    return [" ".join(r.choice(_WORDS) for _ in range(r.randint(3, 12))) + f" zorblat{i % 7} quix" for i in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("static-corpus") / "docs.txt"
    path.write_text("\n".join(_texts(300)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def healed(tiny_bert, corpus, tmp_path_factory):
    pytest.importorskip("model2vec", reason="the static extra (model2vec) is not installed")
    from espresso_export.distilling import distill

    out = tmp_path_factory.mktemp("static") / "healed"
    result = distill(tiny_bert, out, student="static", dim=16, corpus=[str(corpus)], static_vocabulary=5)
    return out, result


def test_healed_folder_loads_in_model2vec_and_sentence_transformers(healed):
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    from model2vec import StaticModel

    from espresso_export.verification.embedders import open_embedder

    out, result = healed
    texts = _texts(40, seed=3) + ["", "an unknown ✓ glyph", "x " * 3000]
    ours = open_embedder(str(out)).encode(texts)
    m2v = StaticModel.from_pretrained(out, force_download=False).encode(texts)
    sbert = st.SentenceTransformer(str(out), device="cpu").encode(texts)
    assert ours.shape == m2v.shape == sbert.shape == (len(texts), 16)
    live = np.linalg.norm(m2v, axis=1) > 0
    assert (ours[live] * m2v[live]).sum(1).min() >= 0.999
    assert (sbert[live] * m2v[live]).sum(1).min() >= 0.999
    assert result.output == out.resolve() and result.healed and result.dim == 16


def test_healing_brings_the_student_closer_to_the_teacher(healed):
    out, result = healed
    assert result.heldout["mean_cosine_after"] > result.heldout["mean_cosine_before"]
    assert result.train["steps"] > 0 and result.train["loss"] == "cosine"
    prov = json.loads((out / "espresso.json").read_text())
    assert prov["step"] == "distill" and prov["student"]["id"] == "static" and prov["healed"] is True
    assert prov["dim"] == 16 and prov["corpus"]["sha256"]
    assert not (out.parent / "healed.run").exists()  # the run folder goes once the model is written


def test_corpus_words_get_rows_of_their_own(healed):
    from model2vec import StaticModel

    out, result = healed
    assert result.vocabulary["corpus_words"] == 5
    tokens = set(StaticModel.from_pretrained(out, force_download=False).tokens)
    assert "quix" in tokens  # seen in every text, absent from the tiny tokenizer's words


def test_the_teacher_pass_is_shared_through_the_cache(healed, tiny_bert, corpus, tmp_path):
    from espresso_export.distilling.static import build_static

    again = build_static(tiny_bert, None, run_dir=tmp_path / "run", dim=8, corpus=[str(corpus)], epochs=1)
    assert again.targets_cached and again.model.dim == 8 and again.output is None


def test_without_a_corpus_it_is_model2vecs_plain_distillation(tiny_bert, tmp_path):
    pytest.importorskip("model2vec", reason="the static extra (model2vec) is not installed")
    from espresso_export.distilling import distill

    result = distill(tiny_bert, tmp_path / "plain", student="static", dim=8)
    assert not result.healed and result.train is None and result.model.dim == 8
    assert any("not healed" in h for h in result.hints)
    with pytest.raises(ValidationError, match="already exists"):  # an existing output is kept
        distill(tiny_bert, tmp_path / "plain", student="static", dim=8)


def test_options_that_mean_nothing_for_a_static_student_are_refused(tiny_bert, tmp_path):
    from espresso_export.distilling import distill

    with pytest.raises(ValidationError, match="--student static takes no --student-layers"):
        distill(tiny_bert, tmp_path / "x", student="static", dim=8, student_layers=2)


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "model2vec", None)  # an import of it fails, as when it is not installed
    with pytest.raises(MissingExtraError, match=r'pip install "espresso-export\[static\]"'):
        require("static")


def test_the_command_without_the_extra_is_one_line_and_exit_2(monkeypatch, capsys, tiny_bert, corpus, tmp_path):
    """``distill --student static`` where model2vec is not installed: the line naming the extra, exit 2 (a
    validation error, docs/architecture.md), nothing written."""
    from espresso_export.cli.app import main

    monkeypatch.setitem(sys.modules, "model2vec", None)
    code = main(["distill", "--teacher", str(tiny_bert), "--student", "static", "--dim", "8", "--corpus",
                 str(corpus), "-o", str(tmp_path / "cli")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == ('error: a static model (model2vec) needs model2vec, which is not installed: '
                           'pip install "espresso-export[static]"'), err
    assert not (tmp_path / "cli").exists()


def test_the_command_prints_the_static_summary(healed, tiny_bert, corpus, tmp_path):
    from typer.testing import CliRunner

    from espresso_export.cli.app import app

    res = CliRunner().invoke(app, ["distill", "--teacher", str(tiny_bert), "--student", "static", "--dim", "8",
                                   "--corpus", str(corpus), "--epochs", "1", "-o", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    assert "held-out cosine" in res.output and "static (model2vec)" in res.output


def test_prune_vocab_keeps_the_rows_a_corpus_uses(healed, corpus, tmp_path):
    from model2vec import StaticModel

    from espresso_export.shrinking.pruning import prune_vocab

    out, _ = healed
    texts = corpus.read_text(encoding="utf-8").splitlines()
    result = prune_vocab(out, tmp_path / "pruned", corpus=str(corpus))
    assert result.vocab_after < result.vocab_before and result.params_after < result.params_before
    before = StaticModel.from_pretrained(out, force_download=False).encode(texts[:50])
    after = StaticModel.from_pretrained(tmp_path / "pruned", force_download=False).encode(texts[:50])
    assert (before * after).sum(1).min() >= 0.9999  # the corpus's texts encode as before
    prov = json.loads((tmp_path / "pruned" / "espresso.json").read_text())
    assert prov["step"] == "prune-vocab" and prov["parent"]["student"]["id"] == "static"


def test_a_recipe_distils_exports_and_verifies_a_static_model(healed, tiny_bert, corpus, tmp_path):
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    from typer.testing import CliRunner

    from espresso_export.cli.app import app

    recipe = tmp_path / "static.yaml"
    recipe.write_text(f"source: {tiny_bert}\nsteps:\n  - distill: {{student: static, dim: 8, corpus: {corpus}, "
                      f"epochs: 1}}\n  - export: {{quantize: int8}}\n  - verify: {{batch_sizes: []}}\n",
                      encoding="utf-8")
    res = CliRunner().invoke(app, ["run", str(recipe), "-o", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "static model, 8-d" in res.output


def test_texts_and_teacher_vectors_given_in_memory(healed, tiny_bert, tmp_path):
    """What ``auto`` calls: its healing texts and their cached teacher vectors, nothing read, nothing written."""
    from espresso_export.distilling.static import build_static
    from espresso_export.model.checkpoint import load

    ckpt = load(tiny_bert)
    texts = _texts(120, seed=5) + ["", "   "] + _texts(10, seed=5)  # empty and repeated texts are dropped
    vectors = np.random.default_rng(0).normal(size=(len(texts), ckpt.output_dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    result = build_static(ckpt, None, run_dir=tmp_path / "run", sentences=texts, teacher_vectors=vectors, dim=8,
                          epochs=1)
    assert result.healed and result.teacher_seconds == 0.0 and result.model.dim == 8
    assert result.corpus["training_sentences"] + result.heldout["texts"] == 120
    with pytest.raises(ValidationError, match="teacher vectors for"):
        build_static(ckpt, None, run_dir=tmp_path / "run2", sentences=texts, teacher_vectors=vectors[:5], dim=8)
