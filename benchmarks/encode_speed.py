"""Our encode paths against sentence-transformers' ``encode``, side by side in one process.

Three paths encode the same texts with the same model, maximum length and batch size on one device:

* ``st``: ``SentenceTransformer.encode`` (the reference);
* ``encode``: :func:`espresso_export.model.embed.encode` (what ``verify`` and training evaluation run);
* ``teacher_pass``: :func:`espresso_export.distilling.targets.teacher_targets` into a fresh cache folder (the
  distill teacher pass: forward, post modules, the chunk files, the PCA fit and the projection);
* ``teacher_pass_amp`` (``--amp``): the teacher pass at distill's precision on that device (bf16 on CUDA).

After a warm-up of every path, the repeats are interleaved (st, encode, teacher_pass, st, ...) so that load on
a shared machine hits every path alike; the report gives each path's median, min and max sentences/s and the
ratio of each path's to ``st``'s in the same repeat (median, min, max). It also checks that ``encode`` and ``st``
agree (largest cosine distance between their vectors).

    python benchmarks/encode_speed.py --device cpu --sentences 2000 --batch-size 64 --max-seq-len 64
    python benchmarks/encode_speed.py --device cuda --sentences 60000 --batch-size 256 --json out.json
    python benchmarks/encode_speed.py --tokenizer ...   # also: the tokenizer's cost per training batch
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import SHARED, minilm


def read_texts(paths: list[Path], n: int) -> list[str]:
    """The first ``n`` distinct non-empty lines of ``paths`` in turn (gzip or plain text)."""
    seen: dict[str, None] = {}
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    seen.setdefault(line)
                if len(seen) >= n:
                    return list(seen)
    return list(seen)


def default_corpus() -> list[Path]:
    return [SHARED / "corpus" / "multi30k-captions.txt.gz", SHARED / "corpus" / "tatoeba-eng.txt.gz"]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def build_paths(model: Path, device: str, batch: int, max_len: int, amp: bool) -> dict:
    """name -> function(texts) -> vectors (or None) for every path compared."""
    import torch
    from sentence_transformers import SentenceTransformer

    from espresso_export.distilling.targets import teacher_targets
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.training.schedule import amp_dtype

    st = SentenceTransformer(str(model), device=device)
    st.max_seq_length = max_len
    ckpt = load(model)
    ckpt.max_seq_length = max_len
    ckpt.model.to(device)
    ckpt.model.eval()

    def teacher(precision):
        def run(texts):
            with tempfile.TemporaryDirectory() as cache:
                t = teacher_targets(ckpt, texts, dim=min(128, ckpt.output_dim), pca_samples=min(len(texts), 2000),
                                    cache_dir=cache, teacher_sha="bench", batch_size=batch, precision=precision)
                return np.asarray(t.targets).copy()
        return run

    paths = {
        "st": lambda texts: st.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False),
        "encode": lambda texts: encode(ckpt, texts, batch_size=batch),
        "teacher_pass": teacher(None),
    }
    if amp:
        paths["teacher_pass_amp"] = teacher(amp_dtype("auto", torch.device(device)) or torch.bfloat16)
    return paths


def measure(paths: dict, texts: list[str], device: str, repeats: int) -> dict:
    """Warm-up, then ``repeats`` interleaved timings of every path: sentences/s per path and per repeat."""
    warm = texts[: min(len(texts), 512)]
    for fn in paths.values():
        fn(warm)
    rates: dict[str, list[float]] = {name: [] for name in paths}
    outputs: dict = {}
    for _ in range(repeats):
        for name, fn in paths.items():
            _sync(device)
            start = time.perf_counter()
            outputs[name] = fn(texts)
            _sync(device)
            rates[name].append(len(texts) / (time.perf_counter() - start))
    return {"rates": rates, "outputs": outputs}


def summarise(rates: dict[str, list[float]]) -> dict:
    out = {}
    for name, r in rates.items():
        ratio = [a / b for a, b in zip(r, rates["st"])]
        out[name] = {"sentences_per_s": {"median": round(statistics.median(r), 1), "min": round(min(r), 1),
                                         "max": round(max(r), 1), "all": [round(x, 1) for x in r]},
                     "ratio_to_st": {"median": round(statistics.median(ratio), 3), "min": round(min(ratio), 3),
                                     "max": round(max(ratio), 3)}}
    return out


def tokenizer_cost(model: Path, texts: list[str], batch: int, max_len: int, batches: int = 100) -> dict:
    """Milliseconds per batch of ``batch`` random texts: the tokenizer per batch (what a training step paid) vs a
    batch cut from the texts tokenised once (``TokenizedTexts``, what distill's training does), and the one-off
    cost of tokenising them all."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import TokenizedTexts, tokenize

    ckpt = load(model)
    rng = np.random.default_rng(0)
    picks = [np.sort(rng.choice(len(texts), size=min(batch, len(texts)), replace=False)) for _ in range(batches)]
    start = time.perf_counter()
    for idx in picks:
        tokenize(ckpt, [texts[i] for i in idx], max_len)
    per_batch = (time.perf_counter() - start) / batches * 1e3
    start = time.perf_counter()
    tokens = TokenizedTexts(ckpt, texts, max_len)
    once = time.perf_counter() - start
    start = time.perf_counter()
    for idx in picks:
        tokens.batch(idx)
    cut = (time.perf_counter() - start) / batches * 1e3
    return {"tokenize_per_batch_ms": round(per_batch, 2), "pretokenized_batch_ms": round(cut, 2),
            "tokenize_all_once_s": round(once, 2), "texts": len(texts), "batch": batch}


def agreement(a: np.ndarray, b: np.ndarray) -> float:
    """The largest cosine distance between matching rows of ``a`` and ``b``."""
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.max(1.0 - (a * b).sum(1)))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: all-MiniLM-L6-v2)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-seq-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--corpus", type=Path, nargs="*", default=None, help="text files (default: the shared corpora)")
    ap.add_argument("--amp", action="store_true", help="also time the teacher pass at distill's precision")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tokenizer", action="store_true", help="also time the tokenizer per training batch of 128")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    model = args.model or minilm()
    texts = read_texts(args.corpus or default_corpus(), args.sentences)
    paths = build_paths(model, args.device, args.batch_size, args.max_seq_len, args.amp)
    got = measure(paths, texts, args.device, args.repeats)
    result = {
        "device": args.device, "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "threads": torch.get_num_threads(), "model": str(model), "sentences": len(texts),
        "batch_size": args.batch_size, "max_seq_len": args.max_seq_len, "repeats": args.repeats,
        "paths": summarise(got["rates"]),
        "encode_vs_st_max_cosine_distance": agreement(got["outputs"]["encode"], got["outputs"]["st"]),
    }
    if args.tokenizer:
        result["tokenizer"] = tokenizer_cost(model, texts, 128, args.max_seq_len)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
