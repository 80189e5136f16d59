"""Vocabulary pruning of all-mpnet-base-v2 cut to 4 layers / 128-d, exported to int8 ONNX.

    PYTHONPATH=$PWD python benchmarks/prune_vocab.py [--threads 1] [--keep DIR]

(from a git worktree outside the main checkout: ESPRESSO_SHARED_DATA=/path/to/shared/data)

1. `shrink(mpnet, layers=4, dim=128)` (spread layers, PCA head on the shipped calibration corpus);
2. `prune_vocab` of that cut on the shared corpora: corpus/tatoeba-eng.txt.gz, corpus/multi30k-captions.txt.gz
   and the STS-B train + dev sentences (never STS-B test);
3. `export(..., quantize="int8")` of the pruned cut and, for comparison, of the unpruned cut;
4. STS-B test Spearman of the four models (unpruned / pruned x PyTorch / int8 ONNX), all in this process with
   the same thread count, and the share of STS-B test tokens the pruned vocabulary covers.

Targets: the pruned int8 file <= 1/12 of the source's model.safetensors; STS-B test retention of the pruned
model >= 99.5% of the unpruned L4/d128. Writes benchmarks/results/prune-vocab-mpnet-L4-d128.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _models import SHARED, mpnet  # noqa: E402

# the shared data sits beside the project checkout; a git worktree elsewhere names it with ESPRESSO_SHARED_DATA
DATA = Path(os.environ.get("ESPRESSO_SHARED_DATA", SHARED))


def stsb(split: str) -> Path:
    return DATA / "stsb" / f"sts-{split}.csv"

SIZE_TARGET = 1 / 12
RETENTION_TARGET = 0.995


def corpora() -> list[str]:
    files = [DATA / "corpus" / "tatoeba-eng.txt.gz", DATA / "corpus" / "multi30k-captions.txt.gz",
             stsb("train"), stsb("dev")]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"shared data not found: {', '.join(missing)}")
    return [str(f) for f in files]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime threads (default 1)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the model folders here instead of a temp dir")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from espresso_export import export, shrink
    from espresso_export.checkpoint import load
    from espresso_export.pruning import coverage, find_pruning, prune_vocab
    from espresso_export.verification.embedders import EncodeCache, TorchEmbedder, open_onnx
    from espresso_export.verification.sts import load_sts, retention, sts_score

    source = mpnet()
    source_bytes = (source / "model.safetensors").stat().st_size
    work = args.keep or Path(tempfile.mkdtemp(prefix="espresso-prune-"))
    work.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    load_before = os.getloadavg()[0]
    try:
        t = time.perf_counter()
        cut = shrink(str(source), work / "mpnet-L4-d128", layers=4, dim=128, overwrite=True)
        timings["shrink"] = time.perf_counter() - t
        print(f"shrink: layers {cut.layers}, {cut.dim}-d {cut.head.value}, {cut.params_after / 1e6:.1f}M params")

        t = time.perf_counter()
        pruned = prune_vocab(cut.output, work / "mpnet-L4-d128-pruned", corpus=corpora(), overwrite=True)
        timings["prune_vocab"] = time.perf_counter() - t
        print(f"prune-vocab: {pruned.vocab_before} -> {pruned.vocab_after} tokens "
              f"({pruned.corpus_sentences} sentences, {pruned.seconds:.1f} s); kept because {pruned.kept_because}")

        exports = {}
        for name, folder in (("unpruned", cut.output), ("pruned", pruned.output)):
            t = time.perf_counter()
            exports[name] = export(folder, work / f"{folder.name}-onnx", quantize="int8", overwrite=True)
            timings[f"export_{name}"] = time.perf_counter() - t
            print(f"export {name}: {[(f['file'], f['bytes']) for f in exports[name].files]}")

        sts = load_sts(str(stsb("test")))
        scores: dict[str, float] = {}
        cov = None
        for name, folder in (("unpruned", cut.output), ("pruned", pruned.output)):
            ckpt = load(folder)
            scores[f"{name}_pytorch"] = sts_score(EncodeCache(TorchEmbedder.from_checkpoint(ckpt)), sts)
            if name == "unpruned":
                unpruned_tokenizer = ckpt.tokenizer
            else:
                cov = coverage(unpruned_tokenizer, sts.sentences(), find_pruning(ckpt.provenance),
                               lower=ckpt.do_lower_case)
            onnx = open_onnx(exports[name].output, str(exports[name].output), threads=args.threads)
            onnx.encoder = type(onnx.encoder)(exports[name].output, "model_int8.onnx", threads=args.threads)
            scores[f"{name}_int8"] = sts_score(EncodeCache(onnx), sts)
        sizes = {name: {f["file"]: f["bytes"] for f in e.files} for name, e in exports.items()}
        int8_bytes = {name: s["model_int8.onnx"] for name, s in sizes.items()}
        tok_bytes = {name: (e.output / "tokenizer.json").stat().st_size for name, e in exports.items()}
        result = {
            "source": "sentence-transformers/all-mpnet-base-v2",
            "source_model_safetensors_bytes": source_bytes,
            "cut": {"layers": cut.layers, "dim": cut.dim, "head": cut.head.value, "params": cut.params_after},
            "pruning": {k: v for k, v in pruned.to_dict().items() if k not in ("output", "source")},
            "corpora": corpora(),
            "onnx_bytes": sizes,
            "tokenizer_json_bytes": tok_bytes,
            "int8_vs_source_weights": {n: round(b / source_bytes, 5) for n, b in int8_bytes.items()},
            "int8_pruned_vs_int8_unpruned": round(int8_bytes["pruned"] / int8_bytes["unpruned"], 4),
            "size_target": f"<= 1/12 = {SIZE_TARGET:.5f}",
            "stsb_test_spearman_x100": {k: round(v, 3) for k, v in scores.items()},
            "retention": {
                "pruned_pytorch_vs_unpruned_pytorch": round(retention(scores["pruned_pytorch"], scores["unpruned_pytorch"]), 5),
                "pruned_int8_vs_unpruned_int8": round(retention(scores["pruned_int8"], scores["unpruned_int8"]), 5),
                "pruned_int8_vs_unpruned_pytorch": round(retention(scores["pruned_int8"], scores["unpruned_pytorch"]), 5),
            },
            "retention_target": f">= {RETENTION_TARGET}",
            "stsb_test_token_coverage": cov,
            "threads": args.threads,
            "seconds": {k: round(v, 1) for k, v in timings.items()},
            "cpus": os.cpu_count(),
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        }
        result["targets_met"] = {
            "size": result["int8_vs_source_weights"]["pruned"] <= SIZE_TARGET,
            "retention": result["retention"]["pruned_pytorch_vs_unpruned_pytorch"] >= RETENTION_TARGET
            and result["retention"]["pruned_int8_vs_unpruned_int8"] >= RETENTION_TARGET,
        }
        out = HERE / "results" / "prune-vocab-mpnet-L4-d128.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({k: result[k] for k in ("onnx_bytes", "int8_vs_source_weights", "stsb_test_spearman_x100",
                                                 "retention", "targets_met")}, indent=2))
        print(f"wrote {out}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
