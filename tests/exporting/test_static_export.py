"""``export`` of a static model folder: one small ONNX graph per precision, read by the torch-free
``OnnxEncoder`` exactly as model2vec reads a text; ``verify`` on the folder and on its export."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

pytest.importorskip("model2vec", reason="the static extra (model2vec) is not installed")
pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")

_WORDS = "the a dog cat man car house tree runs big small red city river music food book school guitar".split()


def _texts(n: int, seed: int) -> list[str]:
    r = random.Random(seed)
    return [" ".join(r.choice(_WORDS) for _ in range(r.randint(2, 14))) + f" qq{i % 5}" for i in range(n)]


@pytest.fixture(scope="module")
def static_folder(tiny_bert, tmp_path_factory):
    from espresso_export.distilling.static import build_static

    root = tmp_path_factory.mktemp("static-export")
    (root / "docs.txt").write_text("\n".join(_texts(200, 0)) + "\n", encoding="utf-8")
    build_static(tiny_bert, root / "model", dim=16, corpus=[str(root / "docs.txt")], epochs=2)
    return root / "model"


@pytest.fixture(scope="module")
def exports(static_folder, tmp_path_factory):
    from espresso_export import export

    root = tmp_path_factory.mktemp("static-exports")
    return {q: export(static_folder, root / q, quantize=q).output for q in ("none", "int8", "fp16")}


@pytest.mark.parametrize("precision", ["none", "int8", "fp16"])
def test_the_runtime_reads_an_export_as_model2vec_encodes(static_folder, exports, precision):
    from model2vec import StaticModel

    from espresso_export.runtime import OnnxEncoder

    texts = _texts(50, 7) + ["", "ünknown ✓✓ glyphs", "word " * 4000, "A Title In Capitals"]
    ref = StaticModel.from_pretrained(static_folder, force_download=False).encode(texts)
    info = json.loads((exports[precision] / "export.json").read_text())
    for f in info["files"]:
        got = OnnxEncoder(exports[precision], f["file"]).encode(texts, batch_size=8)
        live = np.linalg.norm(ref, axis=1) > 0
        assert got.shape == ref.shape
        assert (got[live] * ref[live]).sum(1).min() >= 0.999, f["file"]
        assert np.allclose(got[~live], 0.0)
        assert f["validation"]["passed"]
    assert info["tokenizer"]["add_special_tokens"] is False and info["architecture"]["family"] == "static"


def test_int8_and_fp16_tables_are_smaller(exports):
    sizes = {q: {f["quantization"]: f["bytes"] for f in json.loads((exports[q] / "export.json").read_text())["files"]}
             for q in exports}
    assert sizes["int8"]["int8"] < sizes["fp16"]["fp16"] < sizes["none"]["none"]
    assert json.loads((exports["int8"] / "export.json").read_text())["default_file"].endswith("_quantized.onnx")


def test_the_runtime_stays_torch_free_on_a_static_export(exports, own_process):
    out = own_process("import sys\nfrom espresso_export.runtime import OnnxEncoder\n"
                      f"v = OnnxEncoder({str(exports['int8'])!r}).encode(['a dog runs'])\n"
                      "print(v.shape, 'torch' in sys.modules)")
    assert out.strip().endswith("(1, 16) False")


@pytest.fixture(scope="module")
def search_set(tmp_path_factory):
    """A labelled BEIR folder of 60 tiny documents (12 queries, each its document's first words) and the same
    documents as a text file: ``(beir folder, docs.txt)``."""
    root = tmp_path_factory.mktemp("static-search")
    docs = _texts(60, 11)
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                                               for i, t in enumerate(docs)))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": " ".join(docs[i].split()[:3])})
                                                + "\n" for i in range(12)))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                                     for i in range(12)))
    (root / "docs.txt").write_text("\n".join(docs) + "\n")
    return root, root / "docs.txt"


def test_verify_measures_a_static_folder_and_its_export(static_folder, exports, tiny_bert, search_set):
    pytest.importorskip("faiss", reason="retrieval needs faiss")
    from espresso_export import verify

    beir, docs = search_set
    for model in (static_folder, exports["int8"]):
        report = verify(model, against=tiny_bert, retrieval=[str(beir)], corpus=[str(docs)], batch_sizes=[])
        d = report.to_dict()
        assert d["retrieval"] and d["agreement"], model
        assert d["candidate"]["dim"] == 16


def _plain(tiny_bert, out, dim):
    from espresso_export.distilling import distill

    return distill(tiny_bert, out, student="static", dim=dim).output


def test_nested_widths_of_a_pca_table_are_the_narrower_models_vectors(tiny_bert, tmp_path):
    """model2vec's PCA orders the table's columns: a 16-d table's first 8, renormalised, are the 8-d table's
    vectors, so ``export --dims`` declares them without a hint and stores int8 ranges for each width."""
    from espresso_export import export
    from espresso_export.runtime import OnnxEncoder
    from espresso_export.runtime.precision import truncate

    wide, narrow = _plain(tiny_bert, tmp_path / "d16", 16), _plain(tiny_bert, tmp_path / "d8", 8)
    result = export(wide, tmp_path / "onnx", quantize="int8", dims=[8, 4])
    assert not any("--dims" in h for h in result.hints), result.hints
    info = json.loads((result.output / "export.json").read_text())
    assert info["nested_widths"] == [16, 8, 4] and set(info["vector_calibration"]) == {"16", "8", "4"}
    texts = _texts(40, 3)
    enc = OnnxEncoder(result.output, "onnx/model.onnx")
    want = OnnxEncoder(export(narrow, tmp_path / "onnx8").output).encode(texts)
    assert (enc.encode(texts, dim=8) * want).sum(1).min() >= 0.999
    assert np.allclose(enc.encode(texts, dim=8), truncate(enc.encode(texts), 8), atol=1e-6)
    codes = OnnxEncoder(result.output).encode(texts, dim=4, precision="int8")
    assert codes.dtype == np.int8 and codes.shape == (40, 4)
    assert OnnxEncoder(result.output).encode(texts, precision="binary").shape == (40, 2)  # 16 bits: 2 bytes


def test_widths_of_a_table_without_pca_are_declared_with_the_verify_hint(tiny_bert, tmp_path):
    from espresso_export import export
    from espresso_export.distilling.static import distil_static
    from espresso_export.model.checkpoint import load

    folder = tmp_path / "full"  # model2vec's distillation without a PCA (pca_dims=None): the teacher's 32 columns
    distil_static(load(tiny_bert), words=[], dim=None).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["apply_pca"] is None
    result = export(folder, tmp_path / "onnx", dims=[8])
    assert any(h.startswith("note: --dims 8: the static table was not reduced by a PCA") and "verify" in h
               for h in result.hints), result.hints
    assert json.loads((result.output / "export.json").read_text())["nested_widths"] == [32, 8]


def test_verify_stores_a_static_models_vectors_at_int8_binary_and_nested_widths(static_folder, tiny_bert,
                                                                              search_set, tmp_path):
    """``verify --precision int8,binary --dims 8`` on the folder (ranges fitted on the calibration corpus) and on
    its export (the ranges export.json stores for each width), as for any model."""
    pytest.importorskip("faiss", reason="retrieval needs faiss")
    from espresso_export import export, verify

    beir, docs = search_set
    exported = export(static_folder, tmp_path / "onnx", quantize="int8", dims=[8]).output
    for model, ranges in ((static_folder, "calibration"), (exported, "export.json (vector_calibration)")):
        d = verify(model, against=tiny_bert, retrieval=[str(beir)], corpus=[str(docs)], batch_sizes=[],
                   precision=["int8", "binary"], dims=[8]).to_dict()
        vectors = d["vectors"]
        assert set(vectors["ranges"]) == {"16", "8"} and all(ranges in r for r in vectors["ranges"].values()), d
        got = {(v["precision"], v["dim"]): v for v in vectors["retrieval"][0]["variants"]}
        assert set(got) == {(p, w) for p in ("float32", "int8", "binary") for w in (16, 8)}
        assert [got[p, 16]["bytes_per_vector"] for p in ("float32", "int8", "binary")] == [64, 16, 2]
        assert all(0 <= v["ndcg_at_10"] <= 1 for v in got.values())
        assert [s["dim"] for s in vectors["sts"]] == [8]


def test_widths_wider_than_the_table_are_refused_in_one_line(static_folder, tiny_bert, tmp_path):
    from espresso_export import export, verify
    from espresso_export.core.errors import ValidationError

    with pytest.raises(ValidationError, match="between 1 and the model's 16-d output"):
        export(static_folder, tmp_path / "onnx", dims=[32])
    assert not (tmp_path / "onnx").exists()
    with pytest.raises(ValidationError, match="wider than the candidate's 16-d vectors"):
        verify(static_folder, against=tiny_bert, batch_sizes=[], dims=[32])
