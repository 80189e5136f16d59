"""Speed, size and int8 quality of an exported cut, side by side in one process.

all-mpnet-base-v2 in PyTorch fp32 (the baseline) vs its 4-layer / 128-d cut
(``shrink`` defaults: spread layers, PCA head) in PyTorch, ONNX fp32, ONNX
int8 and ONNX int8 optimised (O2), on the same STS-B test sentences with the
same number of threads. Each configuration is timed ``--repeats`` times,
interleaved with the others, and its best run is kept (the machine is shared,
so the best run is the one least disturbed by other processes).

    python benchmarks/speed.py                   # shrink + export on first use, then measure
    python benchmarks/speed.py --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

OUT = HERE / ".out"


def sentences(n: int) -> list[str]:
    from _models import stsb

    from espresso_export.data import read_sts

    pairs = read_sts(stsb("test"))
    return list(dict.fromkeys(pairs.sentence1 + pairs.sentence2))[:n]


def prepare(threads: int) -> tuple[Path, Path, Path]:
    from _models import mpnet

    from espresso_export import export, shrink

    source = mpnet()
    cut = OUT / "mpnet-L4-d128"
    onnx = OUT / "mpnet-L4-d128-onnx"
    if not (cut / "model.safetensors").is_file():
        shrink(source, cut, layers=4, dim=128, overwrite=True, progress=True)
    if not (onnx / "export.json").is_file():
        export(cut, onnx, quantize="int8", optimize="O2", overwrite=True, progress=True)
    return source, cut, onnx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch1-sentences", type=int, default=64, help="sentences timed one at a time")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    import numpy as np
    import torch

    from _models import stsb

    from espresso_export.model.checkpoint import load
    from espresso_export.data import read_sts
    from espresso_export.model.embed import encode
    from espresso_export.core.metrics import cosine_rows, sts_spearman
    from espresso_export.runtime import OnnxEncoder

    torch.set_num_threads(args.threads)
    source_dir, cut_dir, onnx_dir = prepare(args.threads)
    texts = sentences(args.sentences)
    source, cut = load(source_dir), load(cut_dir)
    onnx = {name: OnnxEncoder(onnx_dir, file, threads=args.threads) for name, file in
            [("ONNX fp32", "onnx/model.onnx"), ("ONNX int8", "onnx/model_quantized.onnx"),
             ("ONNX int8 O2", "onnx/model_quantized_O2.onnx")]}

    def runner(name):
        if name == "source PyTorch fp32":
            return lambda t, b: encode(source, t, batch_size=b)
        if name == "cut PyTorch fp32":
            return lambda t, b: encode(cut, t, batch_size=b)
        return lambda t, b: onnx[name].encode(t, batch_size=b)

    names = ["source PyTorch fp32", "cut PyTorch fp32", *onnx]
    runs = {n: runner(n) for n in names}
    for n in names:  # warm-up
        runs[n](texts[:32], 32)
    b32 = {n: [] for n in names}
    b1 = {n: [] for n in names}
    one = texts[: args.batch1_sentences]
    for r in range(args.repeats):
        for n in names:
            t = time.perf_counter()
            runs[n](texts, 32)
            b32[n].append(len(texts) / (time.perf_counter() - t))
            t = time.perf_counter()
            runs[n](one, 1)
            b1[n].append(1000 * (time.perf_counter() - t) / len(one))
            print(f"repeat {r + 1}: {n}: {b32[n][-1]:.1f} sent/s at batch 32, {b1[n][-1]:.1f} ms at batch 1",
                  file=sys.stderr, flush=True)

    def size(n):
        if n == "source PyTorch fp32":
            return (source_dir / "model.safetensors").stat().st_size
        if n == "cut PyTorch fp32":
            return sum(f.stat().st_size for f in cut_dir.rglob("*.safetensors"))
        f = onnx_dir / onnx[n].file
        data = f.with_name(f.name + ".data")
        return f.stat().st_size + (data.stat().st_size if data.exists() else 0)

    # quality: int8 vs the fp32 cut (PyTorch), cosine on the timed sentences and STS-B test Spearman
    pairs = read_sts(stsb("test"))
    all_texts = pairs.sentence1 + pairs.sentence2
    k = len(pairs)
    ref = encode(cut, all_texts, batch_size=32)
    ref_timed = encode(cut, texts, batch_size=32)
    quality = {"cut PyTorch fp32": {"sts_b_test": sts_spearman(ref[:k], ref[k:], pairs.scores)}}
    for n, enc in onnx.items():
        v = enc.encode(all_texts, batch_size=32)
        quality[n] = {
            "sts_b_test": sts_spearman(v[:k], v[k:], pairs.scores),
            "min_cosine_vs_fp32_cut": float(cosine_rows(enc.encode(texts, batch_size=32), ref_timed).min()),
            "min_cosine_vs_fp32_cut_all_sts_b_test": float(cosine_rows(v, ref).min()),
        }

    base32, base1 = max(b32[names[0]]), min(b1[names[0]])
    base_size = size(names[0])
    rows = []
    for n in names:
        s32, ms1 = max(b32[n]), min(b1[n])
        q = quality.get(n, {})
        rows.append({
            "config": n, "sent_per_s_b32": round(s32, 1), "speedup_b32": round(s32 / base32, 2),
            "ms_b1": round(ms1, 2), "speedup_b1": round(base1 / ms1, 2), "bytes": size(n),
            "size_fraction_of_source": round(size(n) / base_size, 4),
            **{key: round(val, 4) for key, val in q.items()},
        })
    result = {
        "threads": args.threads, "sentences_b32": len(texts), "sentences_b1": len(one), "repeats": args.repeats,
        "cpu": onnx["ONNX int8"].info["cpu"], "rows": rows,
        "validation": {f["file"]: f.get("validation", {}).get("min_cosine") for f in onnx["ONNX int8"].info["files"]},
        "load_average": os.getloadavg(),
    }
    print("| config | sent/s @32 | x | ms @1 | x | size MB | size / source | int8 min cos vs fp32 cut | STS-B test |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cos = r.get("min_cosine_vs_fp32_cut")
        sts = r.get("sts_b_test")
        print(f"| {r['config']} | {r['sent_per_s_b32']} | {r['speedup_b32']}x | {r['ms_b1']} | {r['speedup_b1']}x | "
              f"{r['bytes'] / 1e6:.1f} | 1/{1 / r['size_fraction_of_source']:.1f} | "
              f"{'' if cos is None else f'{cos:.4f}'} | {'' if sts is None else f'{sts:.2f}'} |")
    print(f"\nthreads {args.threads}, CPU {result['cpu']['isa']}, load average {result['load_average']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
