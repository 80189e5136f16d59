"""``export --format onnx,openvino``: the OpenVINO files, their int8 group size, validation, runtime and verify."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.exporting.export_settings import ExportSettings, parse_formats
from espresso_export.runtime.openvino_session import keep_signal_stack
from espresso_export.runtime import EXPORT_FILE, FIXED_WIDTHS, TOKEN_OUTPUT, OnnxEncoder

ov = pytest.importorskip("openvino", reason="the OpenVINO export needs openvino (pip install espresso-export[openvino])")
pytest.importorskip("nncf", reason="the OpenVINO int8 file needs nncf (pip install espresso-export[openvino])")

from espresso_export.exporting.openvino import FP32_FILE, GROUP_OPTION, GROUP_SIZES, INT8_FILE  # noqa: E402

TEXTS = ["A man is playing a guitar.", "The cat sleeps on the warm windowsill.", "Stocks fell sharply on Monday.",
         "short", "Two dogs run through a field of tall grass while a child watches from the fence."]


@pytest.fixture(scope="module")
def ov_export(minilm_export, tmp_path_factory, one_thread):
    """The MiniLM L3/d128 cut exported with the OpenVINO files (int8 included), timed at batch 1 and 8."""
    from espresso_export import export

    shrunk = minilm_export[0]
    out = tmp_path_factory.mktemp("openvino") / "export"
    result = export(shrunk, out, formats=("onnx", "openvino"), quantize="int8", calibration_samples=32,
                    timing_batches="1,8")
    return out, result


def test_openvino_needs_onnx_and_is_a_format():
    assert [f.value for f in parse_formats("onnx,openvino")] == ["onnx", "openvino"]
    with pytest.raises(ValidationError, match="needs onnx too"):
        ExportSettings(formats=("openvino",))
    with pytest.raises(ValidationError, match="onnx, safetensors, openvino"):
        parse_formats("onnx,tensorrt")


def test_openvino_files_are_validated_timed_and_never_the_default(ov_export):
    out, result = ov_export
    info = json.loads((out / EXPORT_FILE).read_text())
    files = {f["file"]: f for f in info["files"]}
    assert {FP32_FILE, INT8_FILE} <= set(files)
    for name in (FP32_FILE, INT8_FILE):
        entry = files[name]
        assert entry["runtime"] == "openvino" and entry["validation"]["passed"], entry["validation"]
        assert entry["validation"]["min_cosine"] >= 0.99
        assert entry["bytes"] > (out / name).stat().st_size  # the .bin weights count
        assert set(entry["speed"]["vs_onnx"]) == {"1", "8"}  # against the ONNX file of its precision
    int8 = files[INT8_FILE]["int8"]
    assert int8["scheme"] == "openvino" and int8["group_size"] in GROUP_SIZES
    # the chosen group is the first (largest) that met the calibration target, or the smallest
    met = [int(g) for g, c in int8["calibration_min_cosine"].items() if c >= int8["calibration_target"]]
    assert int8["group_size"] == (met[0] if met else GROUP_SIZES[-1])
    for name in (FP32_FILE, INT8_FILE):  # fixed-shape copies for one text at a time: timed, kept when faster
        entry = files[name]
        assert entry["fixed_widths"] in ([], list(FIXED_WIDTHS)) and entry["speed"]["batch1_fixed_vs_dynamic"] > 0
        assert OnnxEncoder(out, name).session.fixed_widths == tuple(entry["fixed_widths"])
    assert files[INT8_FILE]["bytes"] < files[FP32_FILE]["bytes"] / 3
    assert info["default_file"].endswith(".onnx") and result.default_file == info["default_file"]
    assert not files[INT8_FILE]["recommended"]
    # not the default, so the summary says when an OpenVINO file is the faster one (and when it is slower)
    for name in (FP32_FILE, INT8_FILE):
        ratios = files[name]["speed"]["vs_onnx"]
        faster = [n for n in info["timing"]["notes"] if n.startswith(f"{name} is faster than")]
        assert len(faster) == all(r > 1 for r in ratios.values())
        assert all(note in result.hints for note in faster)


def test_plain_openvino_runs_the_int8_file_with_its_group_size(ov_export):
    """The user's path without our package: OpenVINO alone reads the group size from the file."""
    out, _ = ov_export
    group = json.loads((out / EXPORT_FILE).read_text())["files"]
    group = next(f for f in group if f["file"] == INT8_FILE)["int8"]["group_size"]
    with keep_signal_stack():  # see test_compiling_leaves_the_threads_signal_stack_alone
        compiled = ov.Core().compile_model(str(out / INT8_FILE), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert int(compiled.get_property(GROUP_OPTION)) == group
    enc = OnnxEncoder(out, INT8_FILE)
    feed = enc.feed(enc.tokenize(TEXTS))
    plain = compiled(feed)[compiled.output("sentence_embedding")]
    np.testing.assert_allclose(plain, enc.run(enc.tokenize(TEXTS))[0], atol=1e-6)
    assert compiled(feed)[compiled.output("last_hidden_state")].shape[:2] == feed["input_ids"].shape


def test_openvino_int8_is_close_to_fp32_and_independent_of_its_batch(ov_export):
    out, _ = ov_export
    fp32 = OnnxEncoder(out, "onnx/model.onnx").encode(TEXTS)
    int8 = OnnxEncoder(out, INT8_FILE)
    together = int8.encode(TEXTS, batch_size=len(TEXTS))
    alone = np.stack([int8.encode(t) for t in TEXTS])
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert (together * fp32).sum(axis=1).min() >= 0.99
    # activation groups never span two tokens: a text's vector does not move with the other texts of its batch
    assert (together * alone).sum(axis=1).min() >= 0.9999


@pytest.mark.parametrize("name", [FP32_FILE, INT8_FILE])
def test_one_text_on_a_fixed_shape_copy_gives_the_dynamic_models_outputs(ov_export, name):
    out, _ = ov_export
    fixed = OnnxEncoder(out, name, fixed_widths=FIXED_WIDTHS)
    dynamic = OnnxEncoder(out, name, fixed_widths=())
    for text in (TEXTS[0], TEXTS[3], "word " * 100):  # 9 and 3 tokens: padded to 16; 102: past the widths
        enc = fixed.tokenize([text])
        got = fixed.run(enc, ("sentence_embedding", TOKEN_OUTPUT))
        want = dynamic.run(enc, ("sentence_embedding", TOKEN_OUTPUT))
        assert got[1].shape == want[1].shape == (1, len(enc[0].ids), 384)  # the padding cut off again
        np.testing.assert_allclose(got[0], want[0], atol=1e-5)
        np.testing.assert_allclose(got[1], want[1], atol=1e-4)
    assert sorted(fixed.session.fixed) == [16] and not dynamic.session.fixed  # 102 tokens: the dynamic model
    assert fixed.encode(TEXTS, batch_size=8).shape == (len(TEXTS), 128) and sorted(fixed.session.fixed) == [16]


def test_verify_opens_one_graph_file_of_an_export_folder(ov_export):
    from espresso_export.verification.embedders import open_embedder

    out, _ = ov_export
    emb = open_embedder(out / INT8_FILE, threads=1)
    assert emb.kind == "openvino" and emb.details["file"] == INT8_FILE
    assert emb.details["inference_num_threads"] == 1
    onnx_emb = open_embedder(out / "onnx" / "model.onnx", threads=1)
    assert onnx_emb.kind == "onnx" and onnx_emb.details["file"] == "onnx/model.onnx"
    # what serving the int8 file needs: not the other graphs of the folder
    assert emb.disk_bytes < onnx_emb.disk_bytes
    v = emb.encode(TEXTS[:2])
    assert v.shape == (2, 128)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sigaltstack through glibc")
def test_compiling_leaves_the_threads_signal_stack_alone(ov_export, own_process):
    """OpenVINO's CPU plugin swaps in a signal stack it frees later (a later Ctrl-C crashed the test run). In a
    process of its own (the signal stack and the SIGINT handler are the process's, which other tests change), with
    the encoder alive while the stack is read: freeing the compiled model gives the old stack back."""
    own_process("""
        import ctypes, signal, sys

        from espresso_export.runtime import OnnxEncoder
        from espresso_export.runtime.openvino_session import _SignalStack

        libc = ctypes.CDLL(None)

        def stack():
            ss = _SignalStack()
            assert libc.sigaltstack(None, ctypes.byref(ss)) == 0
            return ss.ss_sp, ss.ss_size, ss.ss_flags

        before = stack()
        encoder = OnnxEncoder(sys.argv[1], sys.argv[2])  # kept: freeing the compiled model gives the stack back
        encoder.encode(sys.argv[3:])
        assert stack() == before, (stack(), before)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        else:
            sys.exit("SIGINT raised no KeyboardInterrupt")
    """, ov_export[0], INT8_FILE, *TEXTS[:2])


def test_push_stages_the_openvino_weights(minilm_export, ov_export, tmp_path):
    """An IR does not load without its .bin: push stages it (other .bin weights stay refused: pickle)."""
    from espresso_export.publishing.staging import prepare

    out, _ = ov_export
    files = set(prepare(minilm_export[0], onnx=out).sources)
    for name in (FP32_FILE, INT8_FILE):
        assert name in files and name.replace(".xml", ".bin") in files


@pytest.mark.slow  # 25 s: a consumer process loads both OpenVINO files; the card's other snippets run by default
def test_the_cards_sentence_transformers_openvino_snippet_gives_our_vectors(minilm_export, ov_export, tmp_path):
    """The card's ``backend="openvino"`` snippet, run on the staged repository by sentence-transformers[openvino]
    in the consumer environment (no espresso-export there), for both OpenVINO files."""
    from consumers import localise, require_consumer, run_snippets

    from espresso_export import push
    from espresso_export.core.metrics import cosine_rows
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.publishing.runtimes import OPENVINO, snippet
    from espresso_export.publishing.staging import prepare
    from espresso_export.publishing.usage import EXAMPLE_TEXTS

    python = require_consumer("sentence_transformers", "optimum.intel")
    out, _ = ov_export
    repo, repo_id = tmp_path / "repo", "me/minilm-L3-d128"
    push(minilm_export[0], repo_id, onnx=out, dry_run=repo)
    facts = prepare(minilm_export[0], onnx=out).facts
    assert snippet(OPENVINO, facts, repo_id) in (repo / "README.md").read_text()  # the card shows the int8 file's
    assert INT8_FILE in snippet(OPENVINO, facts, repo_id)
    codes = {f: localise(snippet(OPENVINO, facts, repo_id, f), repo_id, repo, TEXTS, EXAMPLE_TEXTS)
             for f in (FP32_FILE, INT8_FILE)}
    got = run_snippets(python, codes, tmp_path)
    reference = encode(load(minilm_export[0]), TEXTS, batch_size=len(TEXTS))  # PyTorch
    for name, to_ours, to_pytorch in ((FP32_FILE, 0.99999, 0.9999), (INT8_FILE, 0.9999, 0.99)):
        ours = OnnxEncoder(out, name).encode(TEXTS)  # the graph's own sentence_embedding, run by OpenVINO
        assert got[name].shape == ours.shape
        # sentence-transformers pools last_hidden_state with the repository's modules, in torch (the int8 file
        # also holds the Dense head with int8 weights: hence not bit-close there)
        assert cosine_rows(got[name], ours).min() >= to_ours, name
        assert cosine_rows(got[name], reference).min() >= to_pytorch, name


@pytest.mark.parametrize("consent", [None, "0", "1"])
def test_openvino_and_nncf_report_no_usage_unless_the_user_opted_in(tmp_path, consent):
    """openvino and nncf report usage to Google Analytics and write ~/intel/ unless a consent file says no:
    through our code they are imported with openvino_telemetry hidden, unless the consent file says yes."""
    import os
    import subprocess

    if consent is not None:
        (tmp_path / "intel").mkdir()
        (tmp_path / "intel" / "openvino_telemetry").write_text(consent)
    code = ("import sys; from espresso_export.core.extras import require; require('openvino-export'); "
            "import openvino, nncf; print(sys.modules.get('openvino_telemetry') is None)")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NNCF_CI")} | {"HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True)
    assert out.stdout.strip() == ("False" if consent == "1" else "True"), out.stderr[-2000:]
    if consent is None:
        assert not (tmp_path / "intel").exists()  # nothing written into the user's home


def test_one_encoder_serves_several_threads(ov_export):
    """A server's threads sharing one encoder (as they may share an onnxruntime session): each text gets its own
    vector (an OpenVINO infer request shared between threads gave other texts' vectors)."""
    from concurrent.futures import ThreadPoolExecutor

    out, _ = ov_export
    enc = OnnxEncoder(out, INT8_FILE, fixed_widths=FIXED_WIDTHS)
    texts = [f"sentence {i} about " + "words " * (i % 23) for i in range(48)]  # one call each: 16, 32, 48 wide
    alone = np.stack([enc.encode(t) for t in texts])
    with ThreadPoolExecutor(4) as pool:
        together = np.stack(list(pool.map(enc.encode, texts)))
        batches = list(pool.map(lambda i: enc.encode(texts[i:i + 8], batch_size=8), range(0, len(texts), 8)))
    np.testing.assert_array_equal(together, alone)
    assert (np.concatenate(batches) * alone).sum(axis=1).min() >= 0.9999


def test_streams_give_the_same_vectors(ov_export):
    """``streams=2`` compiles two OpenVINO streams with a request each: batches encoded side by side, and
    callers at once, get the vectors one stream gives."""
    from concurrent.futures import ThreadPoolExecutor

    out, _ = ov_export
    texts = [f"sentence {i} about " + "words " * (i % 23) for i in range(41)]
    one = OnnxEncoder(out, INT8_FILE, threads=1, fixed_widths=FIXED_WIDTHS)
    two = OnnxEncoder(out, INT8_FILE, threads=2, streams=2, fixed_widths=FIXED_WIDTHS)
    assert int(two.session.compiled.get_property("NUM_STREAMS")) == 2
    for batch in (1, 8):  # 41 texts: batches of at most 6 on two streams (4 batches a stream)
        np.testing.assert_array_equal(two.encode(texts, batch_size=batch), one.encode(texts, batch_size=min(batch, 6)))
    with ThreadPoolExecutor(4) as pool:
        together = np.stack(list(pool.map(two.encode, texts)))
    np.testing.assert_array_equal(together, np.stack([one.encode(t) for t in texts]))
