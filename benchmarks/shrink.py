"""Shrink benchmark: STS-B test Spearman x100 for every depth of MiniLM and MPNet, first-L vs spread.

For each model, selection (first, spread) and depth L, scored on STS-B test:
  * full: the cut model's pooled embedding at full width,
  * first128: its first 128 dims (plain truncation),
  * pca128: a PCA-128 head fitted, as ``shrink`` does, on the shipped calibration corpus.
First-L points come from one forward pass with every layer's state (what the cut model computes, see
``embed.encode_layers``); each spread point runs the real ``shrink`` API in memory on a copy of the loaded
model (timed: cut + calibration + PCA). Finally a real on-disk ``shrink`` of each model to its L4/d128
(MiniLM: L3/d128) is timed end to end (load included); the target for all-mpnet-base-v2 is under 60 s.

    python benchmarks/shrink.py [--models minilm,mpnet] [--out benchmarks/results/shrink.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _models  # noqa: E402

from espresso_export import shrink  # noqa: E402
from espresso_export.model.checkpoint import load  # noqa: E402
from espresso_export.data import read_sentences, read_sts  # noqa: E402
from espresso_export.model.embed import apply_post, encode, encode_layers  # noqa: E402
from espresso_export.shrinking.heads import fit_pca  # noqa: E402
from espresso_export.core.metrics import sts_spearman  # noqa: E402


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class Scorer:
    def __init__(self, pairs):
        self.pairs = pairs
        self.sentences = sorted(set(pairs.sentence1) | set(pairs.sentence2))
        index = {s: i for i, s in enumerate(self.sentences)}
        self.a = [index[s] for s in pairs.sentence1]
        self.b = [index[s] for s in pairs.sentence2]

    def __call__(self, emb: np.ndarray) -> float:
        return round(sts_spearman(emb[self.a], emb[self.b], self.pairs.scores), 2)


def run_model(name: str, path: Path, score: Scorer, calibration: list[str], selects: list[str],
              spread_depths: list[int] | None) -> list[dict]:
    import torch

    src = load(path)
    depth = src.depth
    rows = []
    if "first" in selects:
        rows += _first_rows(name, src, score, calibration)
    if "spread" in selects:
        for layers in spread_depths or range(1, depth):  # spread over all layers is the source itself
            t0 = time.perf_counter()
            result = shrink(copy.deepcopy(src), None, layers=layers, dim=128, select="spread")
            seconds = time.perf_counter() - t0
            ckpt = result.checkpoint
            pooled = torch.from_numpy(encode(ckpt, score.sentences, batch_size=64, post=False))
            with torch.inference_mode():
                normed = apply_post(pooled, ckpt.post[:1]).numpy()  # the Normalize before the head
                head = apply_post(pooled, ckpt.post).numpy()
            rows.append({"model": name, "select": "spread", "L": layers, "layers": result.layers,
                         "full": score(normed), "first128": score(normed[:, :128]), "pca128": score(head),
                         "explained_variance": round(result.explained_variance, 3),
                         "shrink_in_memory_seconds": round(seconds, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _first_rows(name: str, src, score: Scorer, calibration: list[str]) -> list[dict]:
    depth = src.depth
    texts = score.sentences + calibration
    t0 = time.perf_counter()
    states = encode_layers(src, texts, list(range(1, depth + 1)), batch_size=64)
    print(f"{name}: all-layer pass {time.perf_counter() - t0:.0f} s", flush=True)
    n_test = len(score.sentences)
    rows = []
    for layers in range(1, depth + 1):
        x = _unit(states[layers])
        pca = fit_pca(x[n_test:], 128)
        rows.append({"model": name, "select": "first", "L": layers, "layers": list(range(layers)),
                     "full": score(x[:n_test]), "first128": score(x[:n_test, :128]),
                     "pca128": score(pca.transform(x[:n_test])), "explained_variance": round(pca.explained_variance, 3)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def time_shrink(path: Path, layers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        shrink(path, Path(tmp) / "out", layers=layers, dim=128, calibration_samples=2000)
        return round(time.perf_counter() - t0, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="minilm,mpnet")
    ap.add_argument("--select", default="first,spread", help="which selections to measure")
    ap.add_argument("--spread-depths", default="", help="depths for spread (default: every depth)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "shrink.json"))
    args = ap.parse_args()
    import torch

    torch.set_num_threads(2)
    score = Scorer(read_sts(_models.stsb("test")))
    calibration = read_sentences("builtin")
    paths = {"minilm": _models.minilm, "mpnet": _models.mpnet}
    cut_depth = {"minilm": 3, "mpnet": 4}
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.is_file() else {}
    report.update({"sts": "STS-B test", "pairs": len(score.pairs),
                   "calibration": f"builtin ({len(calibration)} sentences)"})
    models = report.setdefault("models", {})
    spread_depths = [int(x) for x in args.spread_depths.split(",") if x]
    for name in args.models.split(","):
        entry = models.setdefault(name, {"rows": []})
        new = run_model(name, paths[name](), score, calibration, args.select.split(","), spread_depths)
        keys = {(r["select"], r["L"]) for r in new}
        entry["rows"] = sorted([r for r in entry["rows"] if (r["select"], r["L"]) not in keys] + new,
                               key=lambda r: (r["select"], r["L"]))
        key = f"shrink_L{cut_depth[name]}_d128_to_disk_seconds"
        entry[key] = time_shrink(paths[name](), cut_depth[name])
        print(name, "shrink to disk:", entry[key], "s", flush=True)
        out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
