"""``OnnxEncoder(..., streams=2)`` against one stream, through ``encode`` as a user calls it, a few minutes.

Each file of an export folder is opened twice with the same thread count: one stream of ``--threads`` threads,
and ``--streams`` streams that split them (onnxruntime: one session, batches run side by side on the streams'
threads; OpenVINO: ``NUM_STREAMS`` with one infer request per stream). Rounds interleave every encoder, each
encoding the first ``--texts`` distinct STS-B test sentences with ``encode(texts, batch_size=B)`` for each
batch size (batch 1: each text its own call to the graph, as an indexing loop that does not batch would).
Prints the median [min-max] sentences/s, the paired ratio of each file's streams to its one stream, and the
paired ratio to the first file's one-stream encoder (each round's ratio; median [min-max] over rounds) and,
with ``--source MODEL``, to that model in PyTorch (our encode, ``--threads`` torch threads). The vectors of the
two ways are checked identical first (one stream at the batch size the streams use: ``batch_size_for``).

    python benchmarks/streams.py benchmarks/.out/minilm-L3-d128-int8 \\
        "fp32=onnx/model.onnx" "int8=onnx/model_quantized.onnx" \\
        "OpenVINO int8=openvino/openvino_model_qint8_quantized.xml" --rounds 7 --source minilm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an export folder")
    parser.add_argument("files", nargs="+", metavar="LABEL=FILE", help="FILE relative to the folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--source", default=None, help="also time this model in PyTorch (minilm, mpnet or a folder)")
    args = parser.parse_args()

    import numpy as np
    from _models import stsb

    from espresso_export.core.cpu import int8_isa
    from espresso_export.data import read_sts
    from espresso_export.runtime import OnnxEncoder

    sts = read_sts(stsb("test"))
    texts = list(dict.fromkeys(sts.sentence1 + sts.sentence2))[: args.texts]
    batches = [int(b) for b in args.batches.split(",")]
    encoders, pairs = {}, {}  # pairs: streams' label -> its file's one-stream label
    if args.source:
        import _models
        import torch

        from espresso_export.model.checkpoint import load
        from espresso_export.model.embed import encode

        torch.set_num_threads(args.threads)
        source = load(getattr(_models, args.source)() if args.source in ("minilm", "mpnet") else args.source)
        encoders["source PyTorch"] = source
    for spec in args.files:
        label, _, file = spec.partition("=")
        one = OnnxEncoder(args.folder, file, threads=args.threads)
        many = OnnxEncoder(args.folder, file, threads=args.threads, streams=args.streams)
        same = many.batch_size_for(len(texts), 8)  # what the streams run when asked for batch 8
        diff = float(np.abs(one.encode(texts, batch_size=same) - many.encode(texts, batch_size=8)).max())
        if diff > 0:
            sys.exit(f"{label}: {args.streams} streams changed the vectors (max |diff| {diff:.2e})")
        encoders[f"{label}, 1 stream x {args.threads} threads"] = one
        encoders[f"{label}, {args.streams} streams"] = many
        pairs[f"{label}, {args.streams} streams"] = f"{label}, 1 stream x {args.threads} threads"

    def rate(encoder, batch: int) -> float:
        start = time.perf_counter()
        if isinstance(encoder, OnnxEncoder):
            encoder.encode(texts, batch_size=batch)
        else:
            encode(encoder, texts, batch_size=batch)
        return len(texts) / (time.perf_counter() - start)

    for encoder in encoders.values():  # warm-up: the first calls pay allocations (and OpenVINO's shape caches)
        for batch in batches:
            rate(encoder, batch)
    results = {b: {k: [] for k in encoders} for b in batches}
    for r in range(args.rounds):
        order = list(encoders) if r % 2 == 0 else list(encoders)[::-1]
        for batch in batches:
            for k in order:
                results[batch][k].append(rate(encoders[k], batch))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    base = next(k for k in encoders if k != "source PyTorch")
    print(f"CPU {int8_isa()['model']} ({int8_isa()['isa']}), {len(texts)} texts, {args.rounds} rounds; "
          f"paired ratios to {base!r} and to the source")
    print("| batch | encoder | sent/s | x base (paired) | x source (paired) | x 1 stream (paired) |\n"
          "|---|---|---|---|---|---|")

    def ratio(v, ref) -> str:
        q = v / np.array(ref)
        return f"{np.median(q):.2f}x [{q.min():.2f}-{q.max():.2f}]"

    for batch in batches:
        for k, v in results[batch].items():
            v = np.array(v)
            against = ratio(v, results[batch]["source PyTorch"]) if args.source else ""
            streams = ratio(v, results[batch][pairs[k]]) if k in pairs else ""
            print(f"| {batch} | {k} | {np.median(v):,.0f} [{v.min():,.0f}-{v.max():,.0f}] | "
                  f"{ratio(v, results[batch][base])} | {against} | {streams} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cpu": int8_isa(), "folder": str(args.folder), "threads": args.threads,
                                         "streams": args.streams, "texts": len(texts), "rounds": args.rounds,
                                         "sent_per_s": results}, indent=1))


if __name__ == "__main__":
    main()
