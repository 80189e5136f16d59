"""The torch-free runtime: OnnxEncoder and export-folder detection."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from espresso_export import export
from espresso_export.core.cpu import int8_isa
from espresso_export.runtime import EXPORT_FILE, ExportFolderError, OnnxEncoder, is_export_folder, read_export_info

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["the dog runs", "a", "music plays in the city today and tomorrow", "éçü", "the cat"]


@pytest.fixture(scope="module")
def bert_export(tiny_bert, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rt") / "onnx"
    export(tiny_bert, out, validate=False)
    return out


def test_runtime_never_imports_torch(bert_export):
    """The runtime works with the card's install line, ``pip install --no-deps espresso-export && pip install
    onnxruntime tokenizers numpy``: none of the package's other dependencies is imported."""
    # the package's own dependencies that the card's torch-free install line (--no-deps) leaves out: none may load
    blocked = ("torch", "transformers", "safetensors", "typer", "click", "rich", "yaml", "sentence_transformers")
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}:\n"
        "            raise ImportError(f'{name} is not installed by the torch-free line')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from espresso_export.runtime import OnnxEncoder, is_export_folder\n"
        f"folder = {str(bert_export)!r}\n"
        "assert is_export_folder(folder)\n"
        "v = OnnxEncoder(folder).encode(['hello world', 'a'], batch_size=2)\n"
        "print(v.shape, v.dtype)\n"
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules]\n"
        "print('heavy:', heavy)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "(2, 32) float32" in run.stdout
    assert "heavy: []" in run.stdout


def test_encode_shapes_order_and_batching(bert_export):
    enc = OnnxEncoder(bert_export, threads=1)
    assert enc.dim == 32 and enc.pooling == "mean" and enc.file == "onnx/model.onnx"
    one_by_one = np.stack([enc.encode(t) for t in TEXTS])  # a str gives a 1-D vector
    batched = enc.encode(TEXTS, batch_size=3)
    assert batched.shape == (len(TEXTS), 32) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)  # input order restored after sorting
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert enc.encode([]).shape == (0, 32)
    with pytest.raises(ValueError, match="batch_size"):
        enc.encode(TEXTS, batch_size=0)


def test_truncates_to_max_seq_length(bert_export):
    enc = OnnxEncoder(bert_export)
    assert len(enc.tokenize(["dog " * 500])[0].ids) == enc.max_seq_length
    assert enc.encode(["dog " * 500]).shape == (1, 32)


def test_export_folder_errors(bert_export, tmp_path):
    assert not is_export_folder(tmp_path)
    with pytest.raises(ExportFolderError, match="no export.json"):
        read_export_info(tmp_path)
    with pytest.raises(ExportFolderError, match="not an ONNX file"):
        OnnxEncoder(bert_export, "model_int8.onnx")
    (tmp_path / EXPORT_FILE).write_text("{not json")
    with pytest.raises(ExportFolderError, match="cannot read"):
        read_export_info(tmp_path)
    (tmp_path / EXPORT_FILE).write_text(json.dumps({"files": []}))
    with pytest.raises(ExportFolderError, match="lists no ONNX files"):
        read_export_info(tmp_path)


@pytest.mark.parametrize(
    "flags, isa",
    [("fpu sse avx2 avx512f avx512_vnni", "avx512_vnni"), ("avx2 avx_vnni", "avx_vnni"), ("sse avx avx2", "avx2")],
)
def test_int8_isa_reads_cpuinfo_flags(tmp_path, flags, isa):
    cpuinfo = tmp_path / "cpuinfo"
    cpu = "cpu family\t: 6\nmodel\t\t: 207\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    cpuinfo.write_text(f"processor\t: 0\n{cpu}flags\t\t: {flags}\n\nprocessor\t: 1\n{cpu}flags\t\t: {flags}\n")
    info = int8_isa(cpuinfo)
    assert info["isa"] == isa
    assert info["model"] == "Intel(R) Xeon(R) Processor (family 6, model 207)"
    assert info["flags"]["avx2"] is ("avx2" in flags)
    assert int8_isa(tmp_path / "missing")["flags"] == {f: False for f in info["flags"]}


def test_format_1_export_folder_still_loads(bert_export, tmp_path):
    """Export folders written before the runtimes' layout: graphs at the top (model.onnx, model_int8.onnx),
    second output token_embeddings. OnnxEncoder reads them as before, under either file name."""
    import onnx

    old = tmp_path / "old"
    shutil.copytree(bert_export, old)
    proto = onnx.load(str(old / "onnx" / "model.onnx"))
    rename = {"last_hidden_state": "token_embeddings"}
    for node in proto.graph.node:
        node.output[:] = [rename.get(o, o) for o in node.output]
        node.input[:] = [rename.get(i, i) for i in node.input]
    proto.graph.output[1].name = "token_embeddings"
    shutil.rmtree(old / "onnx")
    onnx.save(proto, str(old / "model.onnx"))
    info = json.loads((old / EXPORT_FILE).read_text())
    info.update(format_version=1, outputs=["sentence_embedding", "token_embeddings"], default_file="model.onnx")
    info["files"][0]["file"] = "model.onnx"
    (old / EXPORT_FILE).write_text(json.dumps(info))
    expected = OnnxEncoder(bert_export).encode(TEXTS)
    for name in ("model.onnx", "onnx/model.onnx", None):
        enc = OnnxEncoder(old, name)
        assert enc.file == "model.onnx" and enc.token_output == "token_embeddings"
        np.testing.assert_allclose(enc.encode(TEXTS), expected, atol=1e-6)
        assert enc.run(enc.tokenize(TEXTS[:2]), outputs=[enc.token_output])[0].ndim == 3


@pytest.mark.parametrize("users_value", [None, "0"])
def test_onnxruntime_reports_no_usage_unless_the_user_says_so(tmp_path, users_value):
    """onnxruntime's Linux wheels record a device id and a usage event under ~/.cache at import: off through
    espresso-export (ORT_DISABLE_TELEMETRY=1), unless the user set the switch themselves."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"} | {"HOME": str(tmp_path)}
    if users_value is not None:
        env["ORT_DISABLE_TELEMETRY"] = users_value
    code = "import os, espresso_export, onnxruntime; print(os.environ['ORT_DISABLE_TELEMETRY'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert out.stdout.strip() == (users_value or "1")
    if users_value is None:
        assert not list(tmp_path.rglob("*")), "nothing written into the user's home"
