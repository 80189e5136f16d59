"""``espresso-export verify``: the quality gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.core.types import IndexKind
from espresso_export.cli.app import app
from espresso_export.cli.options import (
    BatchSizeOpt, SeedOpt, StsColumnsOpt, StsLimitOpt, StsOpt, MeasureThreadsOpt, TrustRemoteCodeOpt, parse_int_list,
)


@app.command(
    epilog="Exit codes: 0 every threshold given holds, 3 a threshold fails (each failed one is named), "
    "2 bad input, 1 runtime failure.\n\n"
    "Examples:\n\n"
    "  espresso-export verify minilm-L3-d128 --against minilm --min-retention 0.95\n\n"
    "  espresso-export verify small/ --against sentence-transformers/all-mpnet-base-v2 --sts sts-test.csv "
    "--retrieval beir/dbpedia/ --max-latency-ratio 0.5 --json report.json --markdown report.md",
)
def verify(
    candidate: Annotated[str, typer.Argument(help="The model to check: folder (PyTorch, sentence-transformers or "
                                                  "ONNX export), Hub id or alias.")],
    against: Annotated[str, typer.Option("--against", "-a", help="The source model it was made from.")],
    sts: StsOpt = None,
    sts_columns: StsColumnsOpt = None,
    sts_limit: StsLimitOpt = None,
    retrieval: Annotated[
        Optional[list[str]],
        typer.Option("--retrieval", help="Retrieval set, repeatable: a BEIR folder (corpus.jsonl, queries.jsonl, "
                                         "qrels/test.tsv) or an STS spec (sentence1 = query, its pair = relevant "
                                         "document when scored >= --relevant-score, all sentence2 = corpus)."),
    ] = None,
    relevant_score: Annotated[
        float, typer.Option("--relevant-score", help="STS-built retrieval: pairs scored at least this are relevant.")
    ] = 4.0,
    index: Annotated[IndexKind, typer.Option("--index", case_sensitive=False,
                                             help="faiss index: flat (exact inner product) or ivf.")] = IndexKind.FLAT,
    nlist: Annotated[int, typer.Option("--nlist", min=1, help="IVF: number of k-means cells.")] = 100,
    nprobe: Annotated[int, typer.Option("--nprobe", min=1, help="IVF: cells searched per query.")] = 10,
    batch_sizes: Annotated[str, typer.Option("--batch-sizes", help="Latency batch sizes, comma-separated.")] = "1,32",
    threads: MeasureThreadsOpt = None,
    latency_texts: Annotated[int, typer.Option("--latency-texts", min=1,
                                               help="Texts timed per batch size and round (a fixed sample of the "
                                                    "STS sentences).")] = 128,
    latency_rounds: Annotated[int, typer.Option("--latency-rounds", min=1,
                                                help="Timed rounds, alternating the models.")] = 3,
    min_retention: Annotated[Optional[float], typer.Option(
        "--min-retention", help="Gate: candidate/source Spearman on every STS set must be at least this.")] = None,
    max_latency_ratio: Annotated[Optional[float], typer.Option(
        "--max-latency-ratio", help="Gate: candidate/source p50 ms per batch must be at most this at every batch "
                                    "size.")] = None,
    min_retrieval_retention: Annotated[Optional[float], typer.Option(
        "--min-retrieval-retention", help="Gate: candidate/source MRR@10 on every retrieval set must be at least "
                                          "this.")] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON to FILE ('-' for "
                                                                     "stdout, then no table).")] = None,
    markdown_file: Annotated[Optional[Path], typer.Option("--markdown", help="Write the report as Markdown (for a "
                                                                             "model card) to FILE.")] = None,
    batch_size: BatchSizeOpt = 64,
    trust_remote_code: TrustRemoteCodeOpt = False,
    seed: SeedOpt = 0,
) -> None:
    """Measure a model against its source: STS retention, latency, size, retrieval; exit 3 if a threshold fails."""
    from espresso_export.model.layout import write_text_atomic
    from espresso_export.verification.report import Thresholds
    from espresso_export.verification.retrieval import IndexOptions
    from espresso_export.verification.runner import VerifyOptions, verify as run_verify
    from espresso_export.verification.sts import parse_columns
    from espresso_export.cli.render import print_json

    to_stdout = json_file is not None and str(json_file) == "-"
    options = VerifyOptions(
        sts=tuple(sts or ["builtin"]), sts_columns=parse_columns(sts_columns), sts_limit=sts_limit,
        retrieval=tuple(retrieval or ()), retrieval_min_score=relevant_score,
        index=IndexOptions(kind=index, nlist=nlist, nprobe=nprobe),
        batch_sizes=parse_int_list(batch_sizes, "--batch-sizes"),
        threads=threads, latency_texts=latency_texts, latency_rounds=latency_rounds, encode_batch_size=batch_size,
        trust_remote_code=trust_remote_code, seed=seed,
    )
    thresholds = Thresholds(min_retention=min_retention, max_latency_ratio=max_latency_ratio,
                            min_retrieval_retention=min_retrieval_retention)
    report = run_verify(candidate, against, options=options, thresholds=thresholds, progress=not to_stdout)
    if to_stdout:
        print_json(report.to_dict())
    else:
        report.print()
        if json_file is not None:
            import json

            write_text_atomic(json_file, json.dumps(report.to_dict(), indent=2) + "\n")
    if markdown_file is not None:
        write_text_atomic(markdown_file, report.to_markdown())
    report.raise_for_gate()
