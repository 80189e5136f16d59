"""``export --dims``: nested widths declared where loaders read them, exact truncation of a PCA head, and the int8
ranges of every width, fitted at export and used by ``OnnxEncoder.encode(precision=...)``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from espresso_export import export, shrink
from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.exporting.vectors import (
    VECTOR_CALIBRATION_SAMPLES,
    calibration_sentences,
)
from espresso_export.runtime import EXPORT_FILE, ExportFolderError, OnnxEncoder
from espresso_export.runtime.precision import CalibrationRanges, quantize, truncate

TEXTS = ["a", "The cat sits on the mat.", "A man is playing a guitar on the street.", "Café naïve façade déjà vu",
         "Пример предложения", "the dog runs " * 40, "music", "two words"]
FAST = {"validate": False, "timing_batches": "none"}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pca_exports(tiny_bert, calibration_file, tmp_path_factory):
    """The same cut with a 16-d and an 8-d PCA head (one calibration corpus), exported; the 16-d one declares 8."""
    root = tmp_path_factory.mktemp("pca")
    out = {}
    for dim, dims in ((16, [8]), (8, [])):
        shrink(tiny_bert, root / f"d{dim}", layers=1, dim=dim, calibration=calibration_file)
        out[dim] = export(root / f"d{dim}", root / f"d{dim}-onnx", dims=dims, **FAST)
    return out


@pytest.fixture(scope="module")
def nested(tiny_bert, tmp_path_factory):
    """The tiny model (32-d, no head) exported with int8 files and nested widths 16 and 8."""
    out = tmp_path_factory.mktemp("nested") / "onnx"
    return export(tiny_bert, out, quantize="int8", dims="16,8", timing_batches="none")


def test_a_truncated_width_equals_the_pca_fitted_at_that_width(pca_exports):
    wide, narrow = pca_exports[16], pca_exports[8]
    assert wide.nested_widths == [16, 8] and narrow.nested_widths == [8]
    assert not any("verify" in h for h in wide.hints)  # exact for a PCA head: nothing to check
    # fit_pca orders components by variance and fixes each sign (largest coordinate positive), so the 16-d head's
    # first 8 rows are the 8-d head's rows, signs included
    truncated = OnnxEncoder(wide.output).encode(TEXTS, dim=8)
    own = OnnxEncoder(narrow.output).encode(TEXTS)
    np.testing.assert_allclose(truncated, own, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(truncated, axis=1), 1.0, atol=1e-5)


def test_int8_ranges_round_trip_through_the_export_and_the_runtime(nested):
    from sentence_transformers import quantize_embeddings

    info = json.loads((nested.output / EXPORT_FILE).read_text())
    assert info["nested_widths"] == [32, 16, 8] and set(info["vector_calibration"]) == {"32", "16", "8"}
    enc = OnnxEncoder(nested.output)  # the default file, whose vectors the ranges were fitted on
    assert enc.file == info["default_file"] == "onnx/model_quantized.onnx"
    vectors = enc.encode(calibration_sentences(VECTOR_CALIBRATION_SAMPLES))
    floats = enc.encode(TEXTS)
    for width in (32, 16, 8):
        stored = CalibrationRanges.from_dict(info["vector_calibration"][str(width)])
        fitted = CalibrationRanges.fit(vectors if width == 32 else truncate(vectors, width))
        assert stored.samples == fitted.samples == VECTOR_CALIBRATION_SAMPLES
        np.testing.assert_array_equal(stored.ranges, fitted.ranges)
        assert stored.ranges.dtype == np.float32  # the JSON floats read back to the same float32 bits
        at_width = floats if width == 32 else truncate(floats, width)
        codes = enc.encode(TEXTS, precision="int8", dim=width)
        assert codes.dtype == np.int8 and codes.shape == (len(TEXTS), width)
        np.testing.assert_array_equal(codes, quantize(at_width, "int8", stored))
        np.testing.assert_array_equal(codes, quantize_embeddings(at_width, precision="int8", ranges=stored.ranges))
        np.testing.assert_array_equal(enc.encode_document(TEXTS, precision="uint8", dim=width),
                                      quantize(at_width, "uint8", stored))
    assert enc.encode("a", precision="binary", dim=16).shape == (2,)  # one text: one row of packed bits
    np.testing.assert_array_equal(enc.encode_query(TEXTS, precision="ubinary"),
                                  quantize_embeddings(floats, precision="ubinary"))


def test_int8_without_stored_ranges_is_refused(nested, tmp_path):
    enc = OnnxEncoder(nested.output)
    with pytest.raises(ExportFolderError, match="no int8/uint8 ranges for 4-d vectors.*--dims 4"):
        enc.encode(TEXTS, precision="int8", dim=4)
    assert enc.encode(TEXTS, precision="binary", dim=4).shape == (len(TEXTS), 1)  # binary needs no ranges
    with pytest.raises(ValidationError, match="between 1 and the model's 32-d"):
        enc.encode(TEXTS, dim=33)
    with pytest.raises(ValidationError, match="unknown precision"):
        enc.encode(TEXTS, precision="int4")
    older = tmp_path / "older"  # an export written before the ranges were stored
    shutil.copytree(nested.output, older)
    info = json.loads((older / EXPORT_FILE).read_text())
    del info["vector_calibration"], info["nested_widths"]
    (older / EXPORT_FILE).write_text(json.dumps(info))
    old = OnnxEncoder(older)
    assert old.nested_widths == [32]
    with pytest.raises(ExportFolderError, match="ranges for 32-d vectors .*has: none.*export it again"):
        old.encode(TEXTS, precision="uint8")


def test_dims_are_declared_where_loaders_read_them(nested, tiny_bert, tmp_path):
    config = json.loads((nested.output / "config.json").read_text())
    assert config["matryoshka_dimensions"] == [32, 16, 8]  # vLLM's key
    st_config = json.loads((nested.output / "config_sentence_transformers.json").read_text())
    assert not any("matryoshka" in k for k in st_config)  # sentence-transformers reads no such key
    assert any("verify EXPORT --against SOURCE --dims 16,8" in h for h in nested.hints)  # not a PCA head
    # a safetensors export records them in its config.json and its provenance (the card reads them there)
    out = tmp_path / "pt"
    export(tiny_bert, out, formats=("safetensors",), dims=[8])
    assert json.loads((out / "config.json").read_text())["matryoshka_dimensions"] == [32, 8]
    assert json.loads((out / "espresso.json").read_text())["nested_widths"] == [32, 8]


@pytest.mark.parametrize("dims, message", [("64", "--dims 64: a nested width must be between 1 and the model's 32-d"),
                                           ("16,0", "--dims must be positive"), ("8,x", "comma-separated integers")])
def test_bad_widths_exit_2_and_write_nothing(tiny_bert, tmp_path, capsys, dims, message):
    out = tmp_path / "out"
    assert main(["export", str(tiny_bert), "-o", str(out), "--dims", dims]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert not out.exists()
