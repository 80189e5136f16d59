"""``export``: self-contained ONNX graphs, int8, validation, the CLI and its refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from espresso_export import ExportSettings, export
from espresso_export.model.checkpoint import load
from espresso_export.cli.app import main
from espresso_export.model.embed import encode
from espresso_export.core.errors import GateFailedError
from espresso_export.core.metrics import cosine_rows
from espresso_export.runtime import EXPORT_FILE, OnnxEncoder, is_export_folder
from tiny_models import DECODERS, FAMILIES

@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Tiny models run faster on one thread, and far faster when other processes share the cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


TEXTS = [
    "a", "The cat sits on the mat.", "A man is playing a guitar on the street.", "Café naïve façade déjà vu",
    "Пример предложения", "日本語の文", "the dog runs " * 60, "music", "two words",
]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_minilm_export_fp32_and_int8_pass_validation(minilm_export):
    shrunk, out, result = minilm_export
    info = json.loads((out / EXPORT_FILE).read_text())
    files = {f["file"]: f for f in info["files"]}
    assert set(files) == {"onnx/model.onnx", "onnx/model_quantized.onnx"}
    assert info["validated"] is True and info["default_file"] == info["timing"]["recommended"]
    assert info["dims"] == {"hidden": 384, "embedding": 128}
    assert info["pooling"] == "mean" and info["normalize"] is True
    assert info["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert info["outputs"] == ["sentence_embedding", "last_hidden_state"]
    assert info["provenance"]["step"] == "shrink" and info["provenance"]["dim"] == 128
    fp32, int8 = files["onnx/model.onnx"]["validation"], files["onnx/model_quantized.onnx"]["validation"]
    assert fp32["min_cosine"] >= 0.9999 and fp32["max_abs_diff"] < 1e-3
    assert int8["min_cosine"] >= 0.99 and abs(int8["sts_probe"]["delta"]) <= 1.0
    assert files["onnx/model_quantized.onnx"]["checked_on_cpu"]["isa"] == info["cpu"]["isa"]
    scheme = files["onnx/model_quantized.onnx"]["int8"]
    fp32_matmuls = scheme.get("fp32_fallback", scheme.get("weight_only_int8"))
    assert scheme["matmuls_quantized"] + len(fp32_matmuls) == 3 * 6 and scheme["embedding_tables_quantized"] == 3
    assert scheme["weight_bits"] == 7 and scheme["portable"]  # the default file is exact on every CPU and in wasm
    assert scheme["kept_fp32"]  # the PCA head stays fp32
    assert files["onnx/model_quantized.onnx"]["bytes"] < files["onnx/model.onnx"]["bytes"] / 3
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    assert is_export_folder(out) and not is_export_folder(shrunk)


def test_onnx_encoder_matches_sentence_transformer(minilm_export):
    from sentence_transformers import SentenceTransformer

    shrunk, out, _ = minilm_export
    st = SentenceTransformer(str(shrunk), device="cpu")
    expected = st.encode(TEXTS, convert_to_numpy=True)
    got = OnnxEncoder(out, "onnx/model.onnx").encode(TEXTS, batch_size=4)
    assert got.shape == (len(TEXTS), 128) and got.dtype == np.float32
    assert cosine_rows(got, expected).min() >= 0.9999
    int8 = OnnxEncoder(out, "onnx/model_quantized.onnx").encode(TEXTS, batch_size=4)
    assert cosine_rows(int8, expected).min() >= 0.99


def test_one_int8_encoder_serves_request_threads(minilm_export):
    """The README's advice for single queries (one 1-thread encoder shared by request threads): each text gets
    the vector it gets alone, for the per-token int8 file (one text a call, so its vector is exact)."""
    from concurrent.futures import ThreadPoolExecutor

    _, out, _ = minilm_export
    enc = OnnxEncoder(out, "onnx/model_quantized.onnx", threads=1)
    texts = [f"query {i}: " + " ".join(TEXTS[i % len(TEXTS)].split()[: 3 + i % 9]) for i in range(40)]
    alone = np.stack([enc.encode(t) for t in texts])
    with ThreadPoolExecutor(4) as pool:
        together = np.stack(list(pool.map(enc.encode, texts)))
    np.testing.assert_array_equal(together, alone)


@pytest.mark.parametrize("file", ["onnx/model.onnx", "onnx/model_quantized.onnx"])
def test_streams_run_batches_side_by_side_with_the_same_vectors(minilm_export, file):
    """``streams=2`` splits the threads into two streams that encode batches at once: the vectors, in order, of
    one stream at the batch size the streams use (lowered to give each stream 4 batches: 53 texts -> 7), for one
    text and for many; the session's threads are split; 0 streams refused."""
    from espresso_export.runtime.onnx_encoder import BATCHES_PER_STREAM

    _, out, _ = minilm_export
    texts = [f"text {i}: " + " ".join(TEXTS[i % len(TEXTS)].split()[: 2 + i % 11]) for i in range(53)]
    one = OnnxEncoder(out, file, threads=1)
    two = OnnxEncoder(out, file, threads=2, streams=2)
    assert two.session.get_session_options().intra_op_num_threads == 1
    assert -(-len(texts) // (BATCHES_PER_STREAM * 2)) == 7
    for batch in (1, 4, 32):
        np.testing.assert_array_equal(two.encode(texts, batch_size=batch), one.encode(texts, batch_size=min(batch, 7)))
    np.testing.assert_array_equal(two.encode(texts[7]), one.encode(texts[7]))
    np.testing.assert_array_equal(two.encode(texts[:20], batch_size=32), one.encode(texts[:20], batch_size=3))
    assert two.encode([]).shape == (0, two.dim)
    with pytest.raises(ValueError, match="streams must be at least 1"):
        OnnxEncoder(out, file, streams=0)


def test_dynamic_batch_and_sequence_axes(minilm_export):
    import torch

    from espresso_export.model.embed import apply_post, pool

    shrunk, out, _ = minilm_export
    ckpt = load(shrunk)
    enc = OnnxEncoder(out, "onnx/model.onnx")
    rng = np.random.default_rng(0)
    for batch, seq in [(1, 1), (1, ckpt.max_seq_length), (3, 9), (16, 33), (16, ckpt.max_seq_length)]:
        ids = rng.integers(1000, 5000, size=(batch, seq), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[1:, seq // 2 + 1 :] = 0  # ragged rows
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        sentence, tokens = enc.session.run(None, feed)
        with torch.no_grad():
            t_mask = torch.from_numpy(mask)
            states = ckpt.model(input_ids=torch.from_numpy(ids), attention_mask=t_mask).last_hidden_state
            expected = apply_post(pool(states, t_mask, ckpt.pooling), ckpt.post).numpy()
        assert sentence.shape == (batch, 128) and tokens.shape == (batch, seq, 384)
        assert cosine_rows(sentence, expected).min() >= 0.9999, (batch, seq)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_family_exports_with_pooling_and_padding(tiny_models, tmp_path, family):
    out = tmp_path / "onnx"
    result = export(tiny_models[family], out, validate=False)
    assert result.hints  # --no-validate is reported
    ckpt = load(tiny_models[family])
    expected = _unit(encode(ckpt, TEXTS, batch_size=1))
    info = json.loads((out / EXPORT_FILE).read_text())
    assert info["pooling"] == ("lasttoken" if family in DECODERS else "mean")
    produced = ckpt.tokenizer(["a text"]).keys()  # the graph takes exactly what the tokenizer returns
    assert sorted(info["inputs"]) == sorted(produced), (info["inputs"], list(produced))
    enc = OnnxEncoder(out)
    for batch_size in (1, 7):
        got = enc.encode(TEXTS, batch_size=batch_size)
        assert cosine_rows(got, expected).min() >= 0.9999, (family, batch_size)


def test_decoder_left_padding(tiny_models, tmp_path):
    src = tmp_path / "qwen2-left"
    shutil.copytree(tiny_models["qwen2"], src)
    cfg_file = src / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["padding_side"] = "left"
    cfg_file.write_text(json.dumps(cfg))
    out = tmp_path / "onnx"
    export(src, out, validate=False)
    assert json.loads((out / EXPORT_FILE).read_text())["tokenizer"]["padding_side"] == "left"
    expected = _unit(encode(load(src), TEXTS, batch_size=1))
    got = OnnxEncoder(out).encode(TEXTS, batch_size=7)
    assert cosine_rows(got, expected).min() >= 0.9999


@pytest.mark.parametrize("mode", ["last", "all"])
def test_bidirectional_decoder_exports(tiny_models, tmp_path, mode):
    from espresso_export.model.bidirectional import switch

    ckpt = load(tiny_models["qwen2"])
    switch(ckpt, mode)
    expected = _unit(encode(ckpt, TEXTS, batch_size=1))
    out = tmp_path / "onnx"
    export(ckpt, out, validate=False)
    got = OnnxEncoder(out).encode(TEXTS, batch_size=7)
    assert cosine_rows(got, expected).min() >= 0.9999


def test_full_validation_external_data_and_opset(tiny_bert, tmp_path):
    out = tmp_path / "onnx"
    result = export(tiny_bert, out, optimize="O2", opset=14, external_data_threshold=1, max_seq_length=16)
    names = [f["file"] for f in result.files]
    assert names == ["onnx/model.onnx", "onnx/model_O2.onnx"]
    assert (out / "onnx" / "model.onnx.data").is_file() and result.files[0]["external_data"] is True
    info = json.loads((out / EXPORT_FILE).read_text())
    assert info["opset"] == 14 and info["max_seq_length"] == 16 and info["validated"] is True
    assert info["files"][1]["fused"]  # O2 fused something (LayerNorm, SkipLayerNorm, Gelu ...)
    enc = OnnxEncoder(out, "model.onnx")  # the name of format 1 still picks the fp32 graph
    assert enc.file == "onnx/model.onnx"
    assert len(enc.tokenize(["the dog " * 50])[0].ids) == 16
    assert all(f["validation"]["passed"] for f in info["files"])


@pytest.mark.slow
def test_int8_optimised_variant(tiny_bert, tmp_path):
    result = export(tiny_bert, tmp_path / "onnx", quantize="int8", optimize="O3", timing_batches="none")
    names = [f["file"] for f in result.files]
    assert names == ["onnx/model.onnx", "onnx/model_O3.onnx", "onnx/model_quantized.onnx", "onnx/model_quantized_O3.onnx"]
    assert result.default_file == "onnx/model_quantized_O3.onnx"
    assert all(f["validation"]["passed"] for f in result.files)


def test_failed_validation_writes_nothing(tiny_bert, tmp_path):
    out = tmp_path / "onnx"
    with pytest.raises(GateFailedError, match="onnx/model_quantized.onnx: min cosine"):
        export(tiny_bert, out, quantize="int8", min_cosine={"int8": 0.9999999})
    assert not out.exists()
    assert not any(p.name.startswith(".onnx") for p in tmp_path.iterdir())  # no temp folder left


def test_cli_json_onnx_and_safetensors(tiny_bert, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "both"
    code = main(["export", str(tiny_bert), "-o", str(out), "--format", "onnx,safetensors", "--quantize", "fp16",
                 "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["formats"] == ["onnx", "safetensors"] and report["validated"] is True
    assert [f["file"] for f in report["files"]] == ["onnx/model.onnx", "onnx/model_fp16.onnx"]
    assert (out / "model.safetensors").is_file() and (out / "modules.json").is_file()
    assert json.loads((out / "espresso.json").read_text())["step"] == "export"
    # the timing record, reliable or not, is in --json as in export.json (it was in export.json alone)
    assert report["timing"] == json.loads((out / "export.json").read_text())["timing"]
    assert isinstance(report["timing"]["reliable"], bool)
    st = SentenceTransformer(str(out), device="cpu").encode(TEXTS[:4])
    onnx = OnnxEncoder(out, "onnx/model.onnx").encode(TEXTS[:4])
    assert cosine_rows(st, onnx).min() >= 0.9999


def test_cli_safetensors_only(tiny_bert, tmp_path):
    out = tmp_path / "pt"
    assert main(["export", str(tiny_bert), "-o", str(out), "--format", "safetensors"]) == 0
    assert (out / "model.safetensors").is_file() and not (out / "onnx").exists()
    assert not is_export_folder(out)
    assert load(out).output_dim == 32


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "safetensors", "--quantize", "int8"], "needs --format onnx"),
        (["--opset", "9"], "--opset 9 is not supported"),
        (["--format", "tflite"], "--format must be"),
        (["--max-seq-len", "100000"], "more than the model's"),
    ],
)
def test_cli_bad_options(tiny_bert, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert main(["export", str(tiny_bert), "-o", str(out), *args]) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")
    assert not out.exists()


def test_cli_not_a_model_folder(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", str(empty), "-o", str(tmp_path / "out")]) == 2
    assert "not a model folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_output_exists_needs_overwrite(tiny_bert, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", str(tiny_bert), "-o", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"


def test_options_validate_on_construction():
    with pytest.raises(Exception, match="min_cosine keys"):
        ExportSettings(min_cosine={"int4": 0.9})
    assert ExportSettings(formats=("onnx", "onnx")).formats == (ExportSettings().formats[0],)


def test_export_help_lists_options(capsys):
    assert main(["export", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--format", "--quantize", "--optimize", "--opset", "--max-seq-len", "--no-validate", "--json"):
        assert option in text


def test_verify_counts_only_the_served_graph(tiny_bert, tmp_path):
    """An export folder holds several variants; verify's size and parameters are those of the file it serves."""
    from espresso_export.verification.embedders import folder_bytes, open_embedder

    out = tmp_path / "onnx"
    result = export(tiny_bert, out, optimize="O2", external_data_threshold=1, validate=False, timing_batches="none")
    assert result.default_file == "onnx/model_O2.onnx" and (out / "onnx" / "model.onnx.data").is_file()
    emb = open_embedder(str(out))
    assert emb.details["file"] == "onnx/model_O2.onnx"
    unused = [out / "onnx" / "model.onnx", out / "onnx" / "model.onnx.data"]
    assert emb.disk_bytes == folder_bytes(out) - sum(p.stat().st_size for p in unused)
    torch_params = sum(p.numel() for p in load(tiny_bert).model.parameters())
    assert 0.5 * torch_params < emb.n_params <= 1.1 * torch_params + 10_000  # one graph, not two
