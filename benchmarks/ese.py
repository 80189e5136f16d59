"""ESE vs plain fine-tuning vs the untouched model: STS-B test per layer x dims for all-MiniLM-L6-v2.

    python benchmarks/ese.py [--epochs 1] [--batch-size 32] [--lr 2e-5] [--out benchmarks/.cache/ese]
                             [--distill-model FOLDER] [--run-distill]

* RAW: all-MiniLM-L6-v2 as shipped;
* control: fine-tuned on STS-B train with the plain loss on the full-width last layer
  (``train`` without ``--ese``: the same objective with alpha = beta = 0);
* ESE: the same run with ``--ese`` (AnglE loss, k = 128, log layer weights).

Both runs evaluate on STS-B dev after every epoch and keep the best; every number
below is STS-B *test* Spearman x100 (never trained or selected on). Then the ESE
model is cut to 3 layers x 128 dims with ``shrink --head truncate`` and compared
with the distill (shrink-then-heal) L3/d128 model, if one is given or built.
Needs the shared training loop (``espresso_export.training``).
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

from _models import SHARED, minilm  # noqa: E402

DIMS = (32, 64, 128, 384)


def layer_table(ckpt, pairs, dims=DIMS) -> dict[int, dict[int, float]]:
    """``{layer: {dim: STS Spearman x100}}`` for every layer of ``ckpt`` (first-k dims of its pooled output)."""
    from espresso_export.model.embed import encode_layers
    from espresso_export.core.metrics import sts_spearman

    layers = list(range(1, ckpt.depth + 1))
    one = encode_layers(ckpt, pairs.sentence1, layers, batch_size=128)
    two = encode_layers(ckpt, pairs.sentence2, layers, batch_size=128)
    return {i: {k: round(sts_spearman(one[i][:, :k], two[i][:, :k], pairs.scores), 2) for k in dims} for i in layers}


def final_score(folder, pairs) -> float:
    """STS Spearman x100 of a saved model's real output (its own head)."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.core.metrics import sts_spearman

    ckpt = load(folder)
    return round(sts_spearman(encode(ckpt, pairs.sentence1, batch_size=128), encode(ckpt, pairs.sentence2, batch_size=128),
                              pairs.scores), 2)


def shallow_mean(table, dim=128, upto=5) -> float:
    return round(sum(table[i][dim] for i in range(1, upto + 1)) / upto, 2)


def print_tables(tables: dict[str, dict]) -> None:
    header = "| layer | " + " | ".join(f"{name} d{k}" for name in tables for k in DIMS) + " |"
    print(header)
    print("|" + "---|" * (1 + len(tables) * len(DIMS)))
    layers = sorted(next(iter(tables.values())))
    for i in layers:
        print(f"| {i} | " + " | ".join(f"{tables[name][i][k]:.2f}" for name in tables for k in DIMS) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--max-steps", type=int, default=None, help="cap the steps (a quick check, not the benchmark)")
    ap.add_argument("--eval-limit", type=int, default=None, help="dev pairs used for selection (default: all)")
    ap.add_argument("--test-limit", type=int, default=None, help="test pairs (a dry run only; default: all)")
    ap.add_argument("--loss", default="angle")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0, help="training seed (batch order); run several to see the noise")
    ap.add_argument("--arms", default="control,ESE", help="which fine-tuning runs to make (comma-separated)")
    ap.add_argument("--no-cut", action="store_true", help="skip the L3/d128 cut comparison")
    ap.add_argument("--out", type=Path, default=HERE / ".cache" / "ese")
    ap.add_argument("--distill-model", type=Path, default=None, help="a distill L3/d128 model to compare the cut with")
    ap.add_argument("--run-distill", action="store_true", help="build that model with distill (shrink-then-heal)")
    args = ap.parse_args()

    import torch

    from espresso_export.model.checkpoint import load
    from espresso_export.data import read_sts
    from espresso_export.finetuning.train import train_ese
    from espresso_export.finetuning.train_settings import TrainSettings
    from espresso_export.shrinking.shrink import shrink

    if args.threads:
        torch.set_num_threads(args.threads)
    stsb = SHARED / "stsb"
    test = read_sts(stsb / "sts-test.csv", limit=args.test_limit)
    base = minilm()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": "all-MiniLM-L6-v2", "train": "STS-B train", "select": "STS-B dev", "test": "STS-B test",
                    "args": {k: str(v) for k, v in vars(args).items()}, "torch_threads": torch.get_num_threads()}

    tables = {"RAW": layer_table(load(base), test)}
    common = dict(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, max_steps=args.max_steps,
                  checkpoint_every=0, seed=args.seed, loss=args.loss, eval_sts=str(stsb / "sts-dev.csv"),
                  eval_limit=args.eval_limit)
    arms = {"control": TrainSettings(ese=False, **common), "ESE": TrainSettings(ese=True, **common)}
    runs = {name: arms[name] for name in args.arms.split(",")}
    for name, settings in runs.items():
        t0 = time.perf_counter()
        result = train_ese(base, stsb / "sts-train.csv", args.out / name, settings, overwrite=True, progress=True)
        report[name] = {"wall_seconds": round(time.perf_counter() - t0, 1), "train": result.train, "eval": result.eval}
        tables[name] = layer_table(result.checkpoint, test)
        print(f"{name}: {result.train['steps']} steps in {report[name]['wall_seconds']} s", flush=True)
    report["tables"] = tables

    print_tables(tables)

    def finish(summary: dict | None = None) -> int:
        if summary is not None:
            report["summary"] = summary
            print(json.dumps(summary, indent=2))
        (args.out / "report.json").write_text(json.dumps(report, indent=2, default=str))
        return 0

    if set(runs) != set(arms):
        return finish()
    summary = {
        "raw_shallow_mean_d128": shallow_mean(tables["RAW"]),
        "ese_shallow_mean_d128": shallow_mean(tables["ESE"]),
        "control_shallow_mean_d128": shallow_mean(tables["control"]),
        "raw_last_full": tables["RAW"][6][384],
        "control_last_full": tables["control"][6][384],
        "ese_last_full": tables["ESE"][6][384],
    }
    summary["target_shallow_gain_ge_10"] = summary["ese_shallow_mean_d128"] - summary["raw_shallow_mean_d128"] >= 10
    # the target is about cost: ESE may not lose more than 0.5 at the last layer (beating the control is fine)
    summary["target_last_within_0.5"] = summary["ese_last_full"] >= summary["control_last_full"] - 0.5

    if args.no_cut:
        return finish(summary)
    cut = shrink(args.out / "ESE", args.out / "ESE-L3-d128", layers=3, dim=128, head="truncate", overwrite=True)
    summary["ese_cut_L3_d128"] = {"layers": cut.layers, "head": cut.head.value,
                                  "sts_test": final_score(args.out / "ESE-L3-d128", test)}
    raw_cut = shrink(base, args.out / "RAW-L3-d128", layers=3, dim=128, overwrite=True)  # spread + PCA: the default
    summary["raw_cut_L3_d128"] = {"layers": raw_cut.layers, "head": raw_cut.head.value,
                                  "sts_test": final_score(args.out / "RAW-L3-d128", test)}
    distilled = args.distill_model
    if distilled is None and args.run_distill:
        from espresso_export.distilling import distill

        t0 = time.perf_counter()
        distill(base, args.out / "distill-L3-d128", dim=128, corpus=[str(SHARED / "corpus" / "tatoeba-eng.txt.gz")],
                student_layers=3, max_sentences=20000, eval_sts=stsb / "sts-dev.csv", overwrite=True, progress=True)
        summary["distill_wall_seconds"] = round(time.perf_counter() - t0, 1)
        distilled = args.out / "distill-L3-d128"
    if distilled is not None:
        summary["distill_L3_d128"] = {"model": str(distilled), "sts_test": final_score(distilled, test)}
    return finish(summary)


if __name__ == "__main__":
    raise SystemExit(main())
