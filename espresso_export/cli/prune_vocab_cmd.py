"""``espresso-export prune-vocab``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import CorpusColumnOpt, CorpusFieldOpt, JsonOpt, OutputOpt, OverwriteOpt, TrustRemoteCodeOpt

CorpusOpt = Annotated[
    list[str],
    typer.Option("--corpus", "-c", help="Texts whose tokens are kept; repeat for several: .txt, .jsonl, .csv/.tsv "
                                        "(a column), STS-B files (both sentences), 'builtin', or hf://owner/name."),
]
MinCountOpt = Annotated[int, typer.Option("--min-count", min=1, help="Keep tokens seen at least N times on the corpus "
                                                                     "(above 1, rare corpus words get re-segmented).")]
KeepTopOpt = Annotated[Optional[int], typer.Option("--keep-top", min=1, help="Keep at most the N most frequent corpus "
                                                                             "tokens (specials and fallbacks come on top).")]
KeepFileOpt = Annotated[Optional[Path], typer.Option("--keep-file", help="Tokens to keep anyway, one a line, written as "
                                                                         "in the vocabulary (e.g. ##ing).")]


def pruning_rows(result) -> list[tuple[str, object]]:
    """The table rows ``prune-vocab`` prints about the vocabulary."""
    return [
        ("tokenizer", result.tokenizer),
        ("vocabulary", f"{result.vocab_before:,} -> {result.vocab_after:,} tokens "
                       f"({100 * result.vocab_after / result.vocab_before:.1f}%)"),
        ("embedding table", f"{result.embedding_params_before / 1e6:.2f}M -> {result.embedding_params_after / 1e6:.2f}M "
                            "parameters"),
        ("kept because", ", ".join(f"{k} {v:,}" for k, v in result.kept_because.items() if v)),
        ("corpus", f"{result.corpus_sentences:,} sentences, {result.corpus_tokens:,} tokens "
                   f"({result.distinct_corpus_tokens:,} distinct), {100 * result.coverage:.2f}% covered"),
    ]


@app.command(
    "prune-vocab",
    short_help="Keep only the tokens a corpus uses: a smaller vocabulary.",
    epilog="Examples:\n\n"
    "  espresso-export prune-vocab minilm-L3-d128 --corpus domain.txt -o minilm-L3-d128-pruned\n\n"
    "  espresso-export prune-vocab model/ -c a.txt -c b.jsonl --corpus-field text --min-count 2 -o small/\n\n"
    "  espresso-export prune-vocab model/ -c logs.txt --keep-file must_keep.txt -o small/",
)
def prune_vocab(
    model: Annotated[str, typer.Argument(help="Model folder, Hub id, or alias (see `espresso-export models`).")],
    output: OutputOpt,
    corpus: CorpusOpt,
    min_count: MinCountOpt = 1,
    keep_top: KeepTopOpt = None,
    keep_file: KeepFileOpt = None,
    corpus_field: CorpusFieldOpt = None,
    corpus_column: CorpusColumnOpt = None,
    overwrite: OverwriteOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Keep only the tokens a corpus uses, plus specials and fallbacks: a smaller embedding table and tokenizer.

    Corpus sentences encode as before (--min-count 1, no --keep-top); other text falls back to sub-units.
    """
    from espresso_export.shrinking.pruning import prune_vocab as run_prune
    from espresso_export.cli.render import print_table, report_json

    result = run_prune(model, output, corpus=corpus, min_count=min_count, keep_top=keep_top, keep_file=keep_file,
                       overwrite=overwrite, field=corpus_field, column=corpus_column,
                       trust_remote_code=trust_remote_code)
    if report_json(result, json_out):
        return
    rows = [("source", result.source), *pruning_rows(result),
            ("parameters", f"{result.params_before / 1e6:.1f}M -> {result.params_after / 1e6:.1f}M"),
            ("output", result.output), ("time", f"{result.seconds:.1f} s")]
    print_table("prune-vocab", rows)
