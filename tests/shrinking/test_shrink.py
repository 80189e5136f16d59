"""shrink: the cut model computes what the source computes after the kept layers, and reloads anywhere."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors import safe_open

from espresso_export import shrink
from espresso_export.model.architectures import get_attr_path
from espresso_export.model.checkpoint import load
from espresso_export.data import read_sentences
from espresso_export.model.embed import encode, encode_layers
from tiny_models import DEPTH, FAMILIES

TEXTS = ["the dog runs fast today", "a cat", "the big red car plays guitar in the city by the river",
         "café über naïve", "no"]


@pytest.mark.parametrize("family", FAMILIES)
def test_first_layers_cut_equals_source_after_layer_l(family, tiny_models, tmp_path):
    src = load(tiny_models[family])
    reference = encode_layers(src, TEXTS, [2])[2]  # for decoders: final norm applied, as the cut model does
    result = shrink(tiny_models[family], tmp_path / "out", layers=2, select="first")
    cut = load(result.output)
    assert cut.depth == 2
    np.testing.assert_allclose(encode(cut, TEXTS), reference, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_spread_cut_keeps_exactly_the_chosen_layers_weights(family, tiny_models, tmp_path):
    result = shrink(tiny_models[family], tmp_path / "out", layers=[1, 3])
    src, cut = load(tiny_models[family]), load(result.output)
    src_stack = get_attr_path(src.model, src.arch.layers_path)
    cut_stack = get_attr_path(cut.model, cut.arch.layers_path)
    assert len(cut_stack) == 2
    for new, old in enumerate([1, 3]):
        for (name, p), (_, q) in zip(cut_stack[new].state_dict().items(), src_stack[old].state_dict().items()):
            assert np.array_equal(p.numpy(), q.numpy()), name
    # the saved file holds only the kept layers, renumbered 0..1, with as many tensors as the source's two
    prefix = src.arch.layers_path.split(".")[-1]
    with safe_open(str(result.output / "model.safetensors"), framework="pt") as fh:
        saved = {k.split(f"{prefix}.", 1)[1].split(".", 1)[0] for k in fh.keys() if f"{prefix}." in k}
    assert saved == {"0", "1"}


def test_real_minilm_pca_head_reloads_in_sentence_transformers_and_transformers(minilm_path, calibration_file, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from transformers import AutoModel

    out = tmp_path / "minilm-L3-d64"
    result = shrink(minilm_path, out, layers=3, dim=64, calibration=calibration_file)
    assert result.layers == [1, 3, 5] and result.head.value == "pca" and result.dim == 64
    assert 0.3 < result.explained_variance < 1.0
    provenance = json.loads((out / "espresso.json").read_text())
    assert provenance["layers"] == [1, 3, 5] and provenance["dim"] == 64 and provenance["head"] == "pca"
    assert provenance["calibration"]["size"] == 300 and len(provenance["source"]["weights_sha256"]) == 64
    from espresso_export.publishing.facts import safetensors_params

    # the count shrink reports is what the folder holds, the PCA head's Dense layer included (verify's and the card's)
    assert result.params_after == sum(safetensors_params(f) for f in out.rglob("*.safetensors"))
    assert AutoModel.from_pretrained(str(out)).config.num_hidden_layers == 3

    model = st.SentenceTransformer(str(out), device="cpu")
    ours = encode(load(out), TEXTS)
    theirs = model.encode(TEXTS, convert_to_numpy=True)
    assert theirs.shape == (len(TEXTS), 64)
    np.testing.assert_allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)

    # the head is numpy PCA of the cut model's normalised embeddings of the same calibration sentences
    cut_plain = load(out)
    cut_plain.post = cut_plain.post[:1]  # Normalize only: the vectors the PCA was fitted on
    calib = encode(cut_plain, read_sentences(calibration_file))
    mean = calib.astype(np.float64).mean(0)
    _, _, vt = np.linalg.svd(calib - mean, full_matrices=False)
    comps = vt[:64] * np.sign(vt[np.arange(64), np.abs(vt[:64]).argmax(1)])[:, None]
    x = encode(cut_plain, TEXTS).astype(np.float64)
    expected = (x - mean) @ comps.T
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(theirs, expected, atol=1e-4)


def test_real_minilm_first_layers_match_source_hidden_state(minilm_path, tmp_path):
    src = load(minilm_path)
    reference = encode_layers(src, TEXTS, [4])[4]
    out = shrink(minilm_path, tmp_path / "o", layers=4, select="first").output
    cut = load(out)
    cut.post = []  # compare before the (kept) Normalize
    np.testing.assert_allclose(encode(cut, TEXTS), reference, atol=1e-5)


def test_truncate_head_outputs_normalised_first_k_dims(tiny_bert, tmp_path):
    src = load(tiny_bert)
    pooled = encode_layers(src, TEXTS, [DEPTH])[DEPTH]
    out = shrink(tiny_bert, tmp_path / "t", layers=DEPTH, dim=8, head="truncate").output
    got = encode(load(out), TEXTS)
    expected = pooled[:, :8] / np.linalg.norm(pooled[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert json.loads((out / "espresso.json").read_text())["truncate_dim"] == 8


def test_head_none_keeps_width_and_source_modules(minilm_path, tmp_path):
    result = shrink(minilm_path, tmp_path / "n", layers=2, select="first")
    assert result.head.value == "none" and result.dim == 384
    assert any(m["type"].endswith("Normalize") for m in json.loads((result.output / "modules.json").read_text()))


def test_first_layer_cut_of_non_ese_model_prints_hint(tiny_bert, tmp_path):
    assert any("spread" in h for h in shrink(tiny_bert, tmp_path / "a", layers=2, select="first").hints)
    assert not shrink(tiny_bert, tmp_path / "b", layers=2, select="spread").hints


def test_calibration_warnings_and_refusals(tiny_bert, tmp_path):
    few = tmp_path / "few.txt"
    few.write_text("\n".join(f"sentence number {i} about the dog" for i in range(40)))
    result = shrink(tiny_bert, tmp_path / "w", layers=2, dim=8, calibration=few)
    assert any("10 x dim" in h for h in result.hints)
    from espresso_export.core.errors import ValidationError

    with pytest.raises(ValidationError, match="calibration has 10 sentences, too few for --dim 16"):
        shrink(tiny_bert, tmp_path / "r", layers=2, dim=16, calibration=tmp_path / "few.txt", calibration_samples=10)
    assert not (tmp_path / "r").exists()


def test_exactly_dim_calibration_sentences_are_refused(tiny_bert, tmp_path, capsys):
    """k centred sentences span k - 1 directions: a k-d PCA on them has a last direction with no variance, fitted to
    nothing, which new text is projected on. k + 1 sentences is the least that fits every direction."""
    from espresso_export.cli.app import main

    few = tmp_path / "few.txt"
    few.write_text("\n".join(f"sentence number {i} about the dog" for i in range(9)) + "\n")
    code = main(["shrink", str(tiny_bert), "--layers", "2", "--dim", "9", "--calibration", str(few), "-o",
                 str(tmp_path / "k")])
    err = capsys.readouterr().err
    assert code == 2 and "calibration has 9 sentences, too few for --dim 9: a PCA to 9 dims needs at least 10" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "k").exists()
    result = shrink(tiny_bert, tmp_path / "k1", layers=2, dim=8, calibration=few)  # k + 1: every direction fitted
    assert result.calibration_size == 9 and result.dim == 8


def test_progress_shows_on_a_terminal_by_default_and_progress_false_turns_it_off(tiny_bert, tmp_path, monkeypatch):
    """The API shows the calibration bar as the command does (on a terminal, by default); ``progress=False`` hides
    it, and off a terminal (a log, a pipe) the default shows nothing."""
    import io

    from rich.console import Console

    from espresso_export.core import console

    def bar_text(terminal: bool, **kwargs) -> str:
        out = io.StringIO()
        fake = Console(file=out, force_terminal=terminal, width=100, emoji=False)
        monkeypatch.setattr(console, "err_console", lambda: fake)
        shrink(tiny_bert, tmp_path / f"p{len(list(tmp_path.iterdir()))}", layers=2, dim=8, **kwargs)
        return out.getvalue()

    assert "calibrating" in bar_text(True)
    assert bar_text(True, progress=False) == ""
    assert bar_text(False) == ""


def test_default_calibration_is_the_shipped_corpus(tiny_bert, tmp_path):
    result = shrink(tiny_bert, tmp_path / "d", layers=2, dim=8)
    prov = json.loads((result.output / "espresso.json").read_text())
    assert prov["calibration"]["source"] == "builtin" and prov["calibration"]["size"] > 2000


def test_calibration_csv_reads_a_column_like_every_corpus(tiny_bert, tmp_path):
    """--calibration x.csv picks the text column (the header is not a sentence), as --corpus does."""
    from espresso_export.data import read_corpus

    rows = [f"sentence {i} about the dog" for i in range(40)]
    csv_file = tmp_path / "cal.csv"
    csv_file.write_text("id,text\n" + "".join(f'{i},"{s}"\n' for i, s in enumerate(rows)))
    assert read_sentences(csv_file) == rows == read_corpus([csv_file]).sentences
    result = shrink(tiny_bert, tmp_path / "c", layers=2, dim=2, calibration=csv_file)
    prov = json.loads((result.output / "espresso.json").read_text())
    assert prov["calibration"]["size"] == 40  # 41 lines, header excluded
    stsb = tmp_path / "sts.tsv"
    stsb.write_text("main\tnews\t2012\t1\t4.0\tA dog runs.\tA dog is running.\n"
                    "main\tnews\t2012\t2\t1.0\tA cat.\tA car.\n")
    assert read_sentences(stsb) == ["A dog runs.", "A dog is running.", "A cat.", "A car."]
