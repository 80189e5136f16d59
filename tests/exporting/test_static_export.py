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


def test_verify_measures_a_static_folder_and_its_export(static_folder, exports, tiny_bert, tmp_path):
    pytest.importorskip("faiss", reason="retrieval needs faiss")
    from espresso_export import verify

    docs = _texts(60, 11)
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                                                   for i, t in enumerate(docs)))
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": " ".join(docs[i].split()[:3])})
                                                    + "\n" for i in range(12)))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                                         for i in range(12)))
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n")
    for model in (static_folder, exports["int8"]):
        report = verify(model, against=tiny_bert, retrieval=[str(tmp_path)], corpus=[str(tmp_path / "docs.txt")],
                        batch_sizes=[])
        d = report.to_dict()
        assert d["retrieval"] and d["agreement"], model
        assert d["candidate"]["dim"] == 16
