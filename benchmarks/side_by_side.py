"""Time the graph files of one export side by side (onnxruntime, or OpenVINO for an ``.xml``), a few minutes.

Each file gets a session per thread count; rounds interleave every (file, threads) pair, each timing batch 1
over the first 64 distinct STS-B test sentences (in file order) and batch 32 over the first 256, after 3
warm-up batches. Prints the median [min-max] sentences/s, the ratio of medians to the first file and the
paired ratio (each round's ratio to the first file; median [min-max] over the rounds), per thread count and
batch size. For a file that should differ from another only in how it is built (an int8 kernel against the
previous one), this is the quick check; ``benchmarks/int8.py`` is the full comparison (PyTorch, the peer,
fidelity, batch 8 and 128).

    python benchmarks/side_by_side.py benchmarks/.out/minilm-L3-d128-int8 \\
        "fp32=onnx/model.onnx" "int8=onnx/model_quantized.onnx" "previous int8=/path/to/old.onnx" --rounds 5

An OpenVINO file runs on its dynamic model; ``FILE.xml@fixed`` runs one text at a time on its fixed-shape copies
(``runtime.FIXED_WIDTHS``), as an export that kept them (``fixed_widths`` in export.json) does.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an export folder (its tokenizer encodes the sentences)")
    parser.add_argument("files", nargs="+", metavar="LABEL=FILE", help="FILE relative to the folder or absolute")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    from _models import stsb

    from espresso_export.core.cpu import int8_isa
    from espresso_export.data import read_sts
    from espresso_export.runtime.openvino_session import OpenVinoSession
    from espresso_export.runtime import EMBEDDING_OUTPUT, FIXED_WIDTHS, OnnxEncoder

    files = {}
    for item in args.files:
        label, sep, path = item.partition("=")
        path, at, way = path.partition("@")
        path = Path(path) if Path(path).is_absolute() else args.folder / path
        if not sep or not path.is_file() or (at and (way != "fixed" or path.suffix != ".xml")):
            parser.error(f"{item}: expected LABEL=FILE (or LABEL=FILE.xml@fixed) with an existing file")
        files[label] = (path, FIXED_WIDTHS if at else ())
    pairs = read_sts(stsb("test"))
    texts = list(dict.fromkeys(pairs.sentence1 + pairs.sentence2))
    enc = OnnxEncoder(args.folder)
    feeds = {b: [enc.feed(enc.tokenize(texts[i:i + b])) for i in range(0, n, b)] for b, n in ((1, 64), (32, 256))}
    # sessions built here, not OnnxEncoder per file as exporting.timing does: the files compared need not be
    # listed in the folder's export.json, and the feeds are tokenised once, outside the timed loop
    sessions = {}
    for label, (path, widths) in files.items():
        for threads in [int(t) for t in args.threads.split(",")]:
            if path.suffix == ".xml":  # an OpenVINO file (export --format onnx,openvino)
                session = OpenVinoSession(path, threads, pad_token_id=enc.pad_token_id, padding_side=enc.padding_side,
                                          fixed_widths=widths)
            else:
                options = ort.SessionOptions()
                options.intra_op_num_threads, options.inter_op_num_threads, options.log_severity_level = threads, 1, 3
                session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            sessions[label, threads] = (session, {i.name for i in session.get_inputs()})
    for session, names in sessions.values():  # once: every batch-1 shape (compiles the fixed-shape copies)
        for f in feeds[1]:
            session.run([EMBEDDING_OUTPUT], {k: v for k, v in f.items() if k in names})
    rates: dict = {}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for (label, threads), (session, names) in sessions.items():
            for b, batch in feeds.items():
                for f in batch[:3]:
                    session.run([EMBEDDING_OUTPUT], {k: v for k, v in f.items() if k in names})
                start, n = time.perf_counter(), 0
                for f in batch:
                    session.run([EMBEDDING_OUTPUT], {k: v for k, v in f.items() if k in names})
                    n += len(f["input_ids"])
                rates.setdefault(f"{threads}|{b}|{label}", []).append(n / (time.perf_counter() - start))
    first = next(iter(files))
    result = {"cpu": int8_isa(), "rounds": args.rounds,
              "files": {k: str(p) + ("@fixed" if w else "") for k, (p, w) in files.items()},
              "load_average": [load_before, os.getloadavg()], "rates": {}}
    for key, values in rates.items():
        threads, b, label = key.split("|", 2)
        base = rates[f"{threads}|{b}|{first}"]
        row = {"median": float(np.median(values)), "min": min(values), "max": max(values), "rounds": values}
        row["ratio"] = row["median"] / float(np.median(base))
        # the ratio within each round (the two timed seconds apart), then its median and spread: a load change
        # between rounds moves both rates of a round, so the paired ratio is steadier than the ratio of medians
        paired = [v / b0 for v, b0 in zip(values, base)]
        row["paired_ratio"] = {"median": float(np.median(paired)), "min": min(paired), "max": max(paired)}
        result["rates"][key] = row
        print(f"threads {threads} batch {b:>3} {label:28s} {row['median']:8.1f} [{row['min']:7.1f}-{row['max']:7.1f}]"
              f"  {row['ratio']:.2f}x  paired {np.median(paired):.2f}x [{min(paired):.2f}-{max(paired):.2f}]")
    print(f"CPU {result['cpu'].get('isa')}, load average {load_before} -> {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
