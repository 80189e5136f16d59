"""Benchmark ``distill`` (issue 5): shrink-then-heal and HPD, scored on STS-B test.

    python benchmarks/distill.py a   # all-mpnet-base-v2 -> L4 (spread) / d128, healed from itself
    python benchmarks/distill.py b   # HPD: teacher all-mpnet-base-v2, student all-MiniLM-L6-v2, d128
    python benchmarks/distill.py b --pairs --lr 5e-5   # the same with the pair loss on STS-B train pairs
    python benchmarks/distill.py c   # all-MiniLM-L6-v2 -> L3 (spread) / d128, healed from itself
    python benchmarks/distill.py ablation   # c's setting under several training choices, one process
    python benchmarks/distill.py c --nproc 2 --threads 1   # the same run data-parallel on 2 processes (torchrun)

Corpus: STS-B train + dev sentences (both sides of every pair) plus the two shared
corpora (Tatoeba, Multi30k captions), de-duplicated, then a seeded random subset of
``--sentences``. The best checkpoint is chosen on a slice of STS-B dev; the score
reported is Spearman x100 on STS-B test (never trained on). ``--pairs`` trains with
the pair loss on the STS-B train pairs (their scores unused; the teacher supplies
the similarity). Wall time counts
everything: loading, teacher targets (fresh cache), training, evaluation.

``--nproc N`` relaunches this script under ``torchrun --nproc_per_node N`` (gloo on
the CPU, NCCL with ``--device cuda``): the same global batch, split across the
processes; rank 0 scores and reports.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _models import SHARED, minilm, mpnet, stsb  # noqa: E402

from espresso_export.model.checkpoint import load  # noqa: E402
from espresso_export.data import read_sts  # noqa: E402
from espresso_export.distilling import distill  # noqa: E402
from espresso_export.training.distributed import current, setup as setup_dist  # noqa: E402
from espresso_export.model.embed import encode  # noqa: E402
from espresso_export.core.metrics import sts_spearman  # noqa: E402
from espresso_export.shrinking.shrink import shrink  # noqa: E402

SETUPS = {
    "a": dict(teacher="mpnet", student=None, layers=4, label="all-mpnet-base-v2 -> L4/d128 (shrink, then heal)"),
    "b": dict(teacher="mpnet", student="minilm", layers=None, label="HPD: all-mpnet-base-v2 -> all-MiniLM-L6-v2, d128"),
    "c": dict(teacher="minilm", student=None, layers=3, label="all-MiniLM-L6-v2 -> L3/d128 (shrink, then heal)"),
}

ABLATION = [
    ("mse, lr 1e-4", dict(lr=1e-4)),
    ("mse, lr 3e-4", dict(lr=3e-4)),
    ("mse, lr 1e-3", dict(lr=1e-3)),
    ("cosine+mse, lr 1e-3", dict(lr=1e-3, loss="cosine+mse")),
    ("mse + layer targets, lr 1e-3", dict(lr=1e-3, layer_targets=True)),
    ("mse + layer targets w0.1, lr 1e-3", dict(lr=1e-3, layer_targets=True, layer_weight=0.1)),
    ("mse, lr 1e-3, no length bucketing", dict(lr=1e-3, bucket=False)),
    ("mse, lr 1e-3, plain PCA init", dict(lr=1e-3, projection_init="pca")),
]


def _path(name: str) -> Path:
    return {"mpnet": mpnet, "minilm": minilm}[name]()


def corpus_specs() -> list[str]:
    return [str(stsb("train")), str(stsb("dev")), str(SHARED / "corpus" / "tatoeba-eng.txt.gz"),
            str(SHARED / "corpus" / "multi30k-captions.txt.gz")]


def stsb_first_corpus(folder: Path, total: int, seed: int) -> Path:
    """Every distinct STS-B train + dev sentence, topped up to ``total`` with a seeded sample of the shared corpora.

    A random subset of the 238k pooled sentences is ~94% captions and Tatoeba; STS-B test shares its genres
    (news, forums, captions) with train/dev, so keeping all of those in-domain sentences is the cheaper corpus.
    """
    from espresso_export.data import read_corpus

    specs = corpus_specs()
    sts = read_corpus(specs[:2]).sentences
    seen = set(sts)
    rest = [s for s in read_corpus(specs[2:]).sentences if s not in seen]
    extra = max(0, total - len(sts))
    picked = [rest[i] for i in sorted(random.Random(seed).sample(range(len(rest)), min(extra, len(rest))))]
    return _write_on_main(folder / "corpus-stsb-first.txt", "\n".join(sts + picked) + "\n")


def _write_on_main(path: Path, text: str) -> Path:
    """Under torchrun the work folder is shared: rank 0 writes, the others wait until it has."""
    if current().main:
        path.write_text(text, encoding="utf-8")
    current().barrier(f"writing {path.name}")
    return path


def dev_slice(folder: Path, every: int) -> Path:
    lines = stsb("dev").read_text(encoding="utf-8").splitlines()
    return _write_on_main(folder / "sts-dev-slice.csv", "\n".join(lines[::every]) + "\n")


def relaunch_under_torchrun(nproc: int) -> None:
    """Replace this process by ``torchrun --nproc_per_node nproc`` running this script (once)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv, i = [], 1
    while i < len(sys.argv):  # drop --nproc N: torchrun's own parser would take it for --nproc-per-node
        if sys.argv[i] == "--nproc":
            i += 2
            continue
        if not sys.argv[i].startswith("--nproc="):
            argv.append(sys.argv[i])
        i += 1
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
           "--master_port", str(port), str(Path(__file__).resolve()), *argv]
    os.execv(sys.executable, cmd)


def test_score(ckpt) -> float:
    pairs = read_sts(stsb("test"))
    return round(sts_spearman(encode(ckpt, pairs.sentence1, batch_size=64), encode(ckpt, pairs.sentence2, batch_size=64),
                              pairs.scores), 2)


def run(setup: dict, args, work: Path, cache: Path, overrides: dict | None = None, tag: str = "") -> dict:
    start = time.perf_counter()
    if args.stsb_first:
        corpus, cap = [str(stsb_first_corpus(work, args.sentences, args.seed))], None
    else:
        corpus, cap = corpus_specs(), args.sentences
    kwargs = dict(dim=args.dim, corpus=corpus, max_sentences=cap, epochs=args.epochs,
                  batch_size=args.batch_size, lr=args.lr, max_seq_len=args.max_seq_len, loss=args.loss,
                  layer_targets=args.layer_targets, pca_samples=args.pca_samples, eval_sts=dev_slice(work, args.dev_every),
                  cache_dir=cache, checkpoint_every=0, threads=args.threads, progress=True, seed=args.seed,
                  device=args.device, pairs=[str(stsb("train"))] if args.pairs else None)
    kwargs.update(overrides or {})
    out = work / f"out{tag}"
    result = distill(_path(setup["teacher"]), out, student=_path(setup["student"]) if setup["student"] else None,
                     student_layers=setup["layers"], overwrite=True, **kwargs)
    if not current().main:
        return {}
    score = test_score(load(out))
    return {"test": score, "dev_initial": round(result.eval["initial"], 2), "dev_best": round(result.eval["best"], 2),
            "heldout_mse": [round(result.heldout["relative_mse_before"], 4), round(result.heldout["relative_mse_after"], 4)],
            "steps": result.train["steps"], "sentences": result.corpus["training_sentences"],
            "teacher_s": result.teacher_seconds, "train_s": result.train["seconds"],
            "sent_per_s": result.sentences_per_second,
            "wall_s": round(time.perf_counter() - start, 1), "pairs": result.corpus.get("training_pairs"),
            "settings": {k: v for k, v in kwargs.items() if k in ("lr", "loss", "layer_targets", "layer_weight", "bucket",
                                                                  "projection_init", "epochs", "batch_size", "max_seq_len")}
            | {"loss": kwargs["loss"] or ("pair" if args.pairs else "mse")}}


def baseline(setup: dict, args) -> dict:
    """The plain cut with a PCA head (shrink), same layers, scored on STS-B test."""
    start = time.perf_counter()
    src = _path(setup["student"] or setup["teacher"])
    res = shrink(src, None, layers=setup["layers"] or load(src).depth, dim=args.dim, select="spread")
    return {"test": test_score(res.checkpoint), "layers": res.layers, "wall_s": round(time.perf_counter() - start, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", choices=["a", "b", "c", "ablation"])
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--stsb-first", action="store_true",
                    help="keep every STS-B train+dev sentence, then top up to --sentences from the shared corpora "
                         "(default: a random subset of the pooled corpus)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--loss", default=None, help="default: pair with --pairs, else mse")
    ap.add_argument("--pairs", action="store_true", help="train with the pair loss on the STS-B train pairs")
    ap.add_argument("--layer-targets", action="store_true", default=None)
    ap.add_argument("--max-seq-len", type=int, default=64)
    ap.add_argument("--pca-samples", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dev-every", type=int, default=3, help="evaluate on every n-th STS-B dev pair")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (per process with --nproc)")
    ap.add_argument("--nproc", type=int, default=1, help="data-parallel processes (relaunches under torchrun)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--reference", action="store_true", help="also score the full source model on STS-B test")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--runs", help="ablation: comma-separated 0-based indices of the choices to run (default: all)")
    ap.add_argument("--cache-dir", type=Path, help="keep teacher targets here (default: a fresh temp folder, so "
                                                   "their computation is part of the wall time)")
    args = ap.parse_args()
    if args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        relaunch_under_torchrun(args.nproc)
    dist = setup_dist(args.device)  # joins torchrun's group (no-op for one process)

    t0 = time.perf_counter()
    setup = SETUPS["c" if args.which == "ablation" else args.which]
    if dist.enabled:  # one work folder for every rank: torchrun's port names it
        work = Path(tempfile.gettempdir()) / f"distill-bench-{args.which}-{os.environ['MASTER_PORT']}"
        work.mkdir(exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix=f"distill-bench-{args.which}-"))
    cache = args.cache_dir or work / "cache"  # fresh by default: teacher targets are part of the wall time
    report: dict = {"benchmark": args.which, "setup": setup["label"], "processes": dist.world,
                    "args": {k: str(v) for k, v in vars(args).items()}}
    try:
        if args.reference and dist.main:
            ref = _path(setup["student"] or setup["teacher"])
            report["reference_test"] = test_score(load(ref))
        if args.baseline and dist.main:
            report["baseline"] = baseline(setup, args)
            print("baseline (plain cut + PCA head):", report["baseline"], flush=True)
        if args.which == "ablation":
            report["runs"] = {}
            chosen = {int(i) for i in args.runs.split(",")} if args.runs else set(range(len(ABLATION)))
            for i, (name, over) in enumerate(ABLATION):
                if i not in chosen:
                    continue
                report["runs"][name] = run(setup, args, work, cache, over, tag=str(i))
                if dist.main:
                    print(name, json.dumps(report["runs"][name]), flush=True)
        else:
            report["distill"] = run(setup, args, work, cache)
            if dist.main:
                print("distill:", json.dumps(report["distill"]), flush=True)
    finally:
        if dist.main:
            shutil.rmtree(work, ignore_errors=True)
    if not dist.main:
        return
    report["total_wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
