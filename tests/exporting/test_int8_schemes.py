"""int8 schemes picked per CPU (exporting/int8_schemes.py) and the export's timing of its files (exporting/timing.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from espresso_export import export
from espresso_export.cli.app import main
from espresso_export.core.cpu import MAX_OTHER_CORES, usable_cores
from espresso_export.core.errors import ValidationError
from espresso_export.exporting.graph import load_model
from espresso_export.exporting.int8_schemes import has_vnni, write_int8
from espresso_export.exporting.export_settings import ExportSettings, parse_batches
from espresso_export.exporting.export import _calibration_feeds
from espresso_export.publishing.card_sections import onnx_speed
from espresso_export.runtime import EXPORT_FILE, OnnxEncoder

VNNI = {"isa": "avx512_vnni", "flags": {"avx512_vnni": True, "avx512f": True, "avx2": True}, "machine": "x86_64"}
AVX2 = {"isa": "avx2", "flags": {"avx512_vnni": False, "avx_vnni": False, "avx512f": False, "avx2": True},
        "machine": "x86_64"}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def fp32_export(tiny_bert, tmp_path_factory):
    out = tmp_path_factory.mktemp("int8") / "onnx"
    export(tiny_bert, out, timing_batches="none")
    return out


def _ops(path) -> Counter:
    return Counter(n.op_type for n in load_model(path).graph.node)


def test_vnni_detection():
    assert has_vnni(VNNI) and not has_vnni(AVX2)
    assert has_vnni({"isa": "avx_vnni", "flags": {"avx_vnni": True}})
    assert not has_vnni({})


@pytest.mark.parametrize("cpu, bits", [(VNNI, 8), (AVX2, 7)])
def test_dynamic_scheme_uses_fused_kernels_and_cpu_weight_bits(fp32_export, cpu, bits):
    feeds = _calibration_feeds(fp32_export, ExportSettings(calibration_samples=32))
    dst = fp32_export.parent / f"int8_{bits}.onnx"
    report = write_int8(fp32_export / "onnx" / "model.onnx", dst, feeds, scheme="dynamic", alpha=0.5,
                        external_threshold=2_000_000_000, cpu=cpu)
    assert report["scheme"] == "dynamic" and report["weight_bits"] == bits and report["reduce_range"] == (bits == 7)
    assert report["picked_for_cpu"] == cpu["isa"]
    ops = _ops(dst)
    # onnxruntime's dynamic quantisation: one DynamicQuantizeLinear per activation, no per-token chain
    assert ops["MatMulInteger"] == report["matmuls_quantized"] > 0 and ops["DynamicQuantizeLinear"] > 0
    assert ops["ReduceMax"] == 0 and report["embedding_tables_quantized"] >= 1
    assert report["matmuls_quantized"] + len(report["fp32_fallback"]) == len(report["simulated_matmul_error"])


def test_auto_falls_back_to_per_token_when_dynamic_misses_its_target(fp32_export):
    feeds = _calibration_feeds(fp32_export, ExportSettings(calibration_samples=32))
    dst = fp32_export.parent / "auto.onnx"
    report = write_int8(fp32_export / "onnx" / "model.onnx", dst, feeds, scheme="auto", alpha=0.5,
                        external_threshold=2_000_000_000, cpu=VNNI, calibration_min_cosine=1.01)
    assert report["scheme"] == "per-token" and report["weight_bits"] == 8 and "why" in report
    assert _ops(dst)["ReduceMax"] > 0 and not list(dst.parent.glob("auto.onnx.data"))


def test_per_token_scheme_keeps_7_bit_weights_without_vnni(fp32_export):
    feeds = _calibration_feeds(fp32_export, ExportSettings(calibration_samples=32))
    report = write_int8(fp32_export / "onnx" / "model.onnx", fp32_export.parent / "pt.onnx", feeds, scheme="per-token",
                        alpha=0.5, external_threshold=2_000_000_000, cpu=AVX2)
    assert report["scheme"] == "per-token" and report["weight_bits"] == 7 and "int7" in report["method"]


def test_export_times_files_and_recommends_the_fastest_that_passed(tiny_bert, tmp_path):
    result = export(tiny_bert, tmp_path / "onnx", quantize="int8", optimize="O1", timing_batches="1,4",
                    calibration_samples=32)
    info = json.loads((tmp_path / "onnx" / EXPORT_FILE).read_text())
    timing = info["timing"]
    files = {f["file"]: f for f in info["files"]}
    assert timing["batches"] == [1, 4] and timing["recommended"] in files
    assert info["default_file"] == result.default_file == timing["recommended"]
    assert [f["file"] for f in info["files"] if f["recommended"]] == [timing["recommended"]]
    assert OnnxEncoder(tmp_path / "onnx").file == timing["recommended"]
    # all passed validation: the file asked for (int8, optimised) unless another is faster in every round
    spread = {n: f["speed"]["spread"] for n, f in files.items()}
    preferred = "onnx/model_quantized_O1.onnx"
    clear = [n for n in files if n != preferred and all(spread[n][b][0] > spread[preferred][b][1] for b in ("1", "4"))]
    speed = {n: f["speed"]["sentences_per_second"] for n, f in files.items()}
    if not timing["reliable"]:  # a busy machine (CI's neighbours): the file asked for stays, and the notes say why
        clear = []
        assert timing["notes"][0].startswith("timing NOT reliable (") and timing["reasons"]
    assert timing["recommended"] == (max(clear, key=lambda n: speed[n]["1"] * speed[n]["4"]) if clear else preferred)
    assert set(files["onnx/model_O1.onnx"]["speed"]["vs_unoptimized"]) == {"1", "4"}
    int8 = files["onnx/model_quantized.onnx"]["speed"]
    assert int8["faster_than_fp32"] == all(r > 1 for r in int8["vs_fp32"].values())
    slower = [(n, b) for n, f in files.items() for key in ("vs_fp32", "vs_unoptimized")
              for b, r in f["speed"].get(key, {}).items() if r < 1]
    # every slower-than ratio is said, in export.json and in the summary the CLI prints
    said = [n for n in timing["notes"] if not n.startswith(("timing NOT reliable", "the recommendation stays"))]
    assert len(said) == len(slower)
    assert all(note in result.hints for note in timing["notes"])
    card_row = onnx_speed(info)  # the model card's summary row
    assert f"recommended `{timing['recommended']}`" in card_row  # its path (was onnx/onnx/...)
    assert all(note in card_row for note in timing["notes"]) and "sent/s at batch 4" in card_row
    # the recommended file on two streams, at the largest batch size, where there are two cores
    streams = timing["streams"]
    moved = any(n.startswith("the recommendation stays") for n in timing["notes"])  # disturbed: no streams record
    if usable_cores() >= 2 and not moved:
        assert streams["file"] == timing["recommended"] and (streams["streams"], streams["batch"]) == (2, 4)
        assert streams["vs_one_stream"] > 0 and streams["sentences_per_second"] > 0
        assert any(h.startswith("OnnxEncoder(..., streams=2) ran") for h in result.hints)
        assert f"{streams['vs_one_stream']:.2f}x one stream at batch 4" in card_row
    else:
        assert streams is None and not result.hints[-1].startswith("OnnxEncoder(..., streams=")


def test_export_timing_on_a_busy_machine_says_it_is_not_reliable(tiny_bert, tmp_path, capsys):
    """Another process keeping a core busy while the export times its files (the walk-through's export beside a
    benchmark printed "2.14x one stream" on 2 threads): the record says so, and the file asked for stays."""
    import subprocess
    import sys

    if not Path("/proc/stat").is_file():
        pytest.skip("other processes' CPU time is read from /proc/stat (Linux)")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        code = main(["export", str(tiny_bert), "-o", str(tmp_path / "onnx"), "--quantize", "int8", "--optimize", "O1",
                     "--timing-batches", "1,4", "--calibration-samples", "32"])
    finally:
        spinner.kill()
        spinner.wait()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((tmp_path / "onnx" / EXPORT_FILE).read_text())
    timing = manifest["timing"]
    assert timing["other_cores"] > MAX_OTHER_CORES and timing["reliable"] is False
    assert timing["reasons"][0].startswith("other processes kept ")
    assert timing["notes"][0].startswith("timing NOT reliable (other processes kept ")
    assert timing["recommended"] == manifest["default_file"] == "onnx/model_quantized_O1.onnx"  # the file asked for
    assert "the timing was NOT reliable" in captured.err
    # the printed table marks the speeds it shows, not only a note on stderr a log may drop
    table = " ".join(captured.out.split())
    assert "/s? @1" in table and "x? of onnx/model.onnx" in table and "NOT reliable (?): other processes kept" in table
    assert onnx_speed(manifest).startswith("timing NOT reliable (other processes kept ")  # the card's cell: first


def test_the_recommendation_moves_only_for_a_file_faster_in_every_round():
    from espresso_export.exporting.timing import recommend

    names = ["onnx/model.onnx", "onnx/model_quantized.onnx", "onnx/model_quantized_O2.onnx"]
    rates = {  # sentences/s per batch size, one entry per interleaved round
        "onnx/model.onnx": {1: [100, 104, 98], 32: [200, 210, 190]},
        "onnx/model_quantized.onnx": {1: [150, 190, 160], 32: [300, 330, 310]},
        "onnx/model_quantized_O2.onnx": {1: [140, 185, 150], 32: [290, 335, 300]},
    }
    # int8 O2 asked for: the unoptimised int8 is faster on the best rounds but the rounds overlap: no flip
    assert recommend(rates, names, "onnx/model_quantized_O2.onnx") == "onnx/model_quantized_O2.onnx"
    # an int8 file slower than fp32 in every round at every batch size gives way to fp32
    slow = {**rates, "onnx/model_quantized_O2.onnx": {1: [60, 70, 65], 32: [150, 160, 170]}}
    assert recommend(slow, names, "onnx/model_quantized_O2.onnx") == "onnx/model_quantized.onnx"
    assert recommend(slow, names[::2], "onnx/model_quantized_O2.onnx") == "onnx/model.onnx"
    # faster at batch 32 only: not clear at every batch size, so the file asked for stays
    mixed = {**slow, "onnx/model.onnx": {1: [50, 55, 52], 32: [400, 410, 405]}}
    assert recommend(mixed, names[::2], "onnx/model_quantized_O2.onnx") == "onnx/model_quantized_O2.onnx"


def test_timing_off_keeps_the_static_default(tiny_bert, tmp_path):
    result = export(tiny_bert, tmp_path / "onnx", quantize="int8", timing_batches="none", calibration_samples=32)
    info = json.loads((tmp_path / "onnx" / EXPORT_FILE).read_text())
    assert "timing" not in info and result.default_file == "onnx/model_quantized.onnx"
    assert all("speed" not in f for f in info["files"])


def test_timing_and_scheme_options_validate():
    assert parse_batches("1, 32") == (1, 32) and parse_batches("none") == () and parse_batches((8,)) == (8,)
    assert ExportSettings(timing_batches="8").timing_batches == (8,)
    with pytest.raises(ValidationError, match="timing-batches"):
        ExportSettings(timing_batches="one")
    with pytest.raises(ValidationError, match="positive"):
        ExportSettings(timing_batches="0")
    with pytest.raises(ValidationError, match="int8-scheme"):
        ExportSettings(int8_scheme="static")


def test_portable_weights_are_7_bit_even_on_vnni(fp32_export):
    """The default (--int8-weights portable): an exported file is served on other CPUs and in onnxruntime-web,
    whose kernels saturate on 8-bit weights, so the VNNI machine writes 7-bit weights unless asked."""
    feeds = _calibration_feeds(fp32_export, ExportSettings(calibration_samples=32))
    dst = fp32_export.parent / "portable.onnx"
    report = write_int8(fp32_export / "onnx" / "model.onnx", dst, feeds, scheme="dynamic", alpha=0.5,
                        external_threshold=2_000_000_000, cpu=VNNI, portable=True)
    assert report["weight_bits"] == 7 and report["reduce_range"] and report["portable"]
    assert ExportSettings().int8_weights == "portable"


def _one_matmul_graph(w):
    """x [batch, tokens, K] @ w, the smallest graph the per-token rewrite applies to."""
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", w.shape[1]])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y],
                              [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _has_vnni() -> bool:
    from espresso_export.core.cpu import int8_isa

    flags = int8_isa()["flags"]
    return flags["avx512_vnni"] or flags["avx_vnni"]


@pytest.mark.parametrize("weight_max", [63, pytest.param(127, marks=pytest.mark.skipif(
    not _has_vnni(), reason="8-bit weights saturate onnxruntime's AVX2 u8s8 kernel (int16 pair sums): the reason "
                            "the portable scheme keeps 7 bits; exact only with VNNI"))])
def test_per_token_kernel_computes_the_simulated_int8_product(weight_max):
    """The fused graph (QuantizeLinear per token, MatMulIntegerToFloat, zero points undone by Mul + Sub) gives
    what the calibration's numpy model of the scheme gives, a token's result does not depend on the other
    tokens of the batch, and no rounding chain is left in front of the MatMul."""
    import onnxruntime as ort

    from espresso_export.exporting.int8_calibration import fake_int8
    from espresso_export.exporting.onnx_edit import GraphEditor
    from espresso_export.exporting.quantize import quantize_matmuls

    rng = np.random.default_rng(0)
    w = rng.normal(size=(48, 24)).astype(np.float32)
    x = rng.normal(size=(3, 5, 48)).astype(np.float32)
    x[0, 1] *= 40.0  # an outlier token: per-token scales keep it from flattening the others
    x[2, 3] = np.abs(x[2, 3])  # a token with no negative value (zero point 0)
    proto = _one_matmul_graph(w)
    g = GraphEditor(proto)
    assert quantize_matmuls(g, g.weight_matmuls(exclude=set()), weight_max=weight_max) == 1
    g.drop_unused_initializers()
    ops = Counter(n.op_type for n in proto.graph.node)
    assert ops["MatMulIntegerToFloat"] == 1 and ops["QuantizeLinear"] == 1
    assert not ops["MatMul"] and not ops["MatMulInteger"] and not ops["Clip"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    want = fake_int8(x.reshape(-1, 48).astype(np.float64), w.astype(np.float64), weight_max).reshape(3, 5, 24)
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    alone = session.run(None, {"x": x[1:2]})[0]
    np.testing.assert_array_equal(alone[0], got[1])
    exact = x @ w  # and it is an int8 approximation of the fp32 product, not something else
    assert 0 < np.abs(got - exact).max() < 0.05 * np.abs(exact).max()
