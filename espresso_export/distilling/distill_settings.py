"""The settings of ``distill``, declared once: the API, the command and the recipe step derive from this class
(:mod:`espresso_export.core.settings`). Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from espresso_export.core.parsing import parse_layers
from espresso_export.core.settings import check_choices, declared_as, setting
from espresso_export.core.types import CorpusSample, Loss, ProjectionInit, Select
from espresso_export.core.common_settings import select_setting
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.training.trainer_settings import TrainerSettings, bucket_setting


@dataclass
class DistillSettings(TrainerSettings):
    """:func:`espresso_export.distilling.run`: HPD, or shrink-then-heal a cut teacher."""

    dim: Optional[int] = setting(None, min=1, flags=("--dim", "-d"), help="Embedding width d of the student (PCA of the "
                                                                   "teacher).")
    corpus: Optional[list[str]] = setting(
        None, path="data", flags=("--corpus", "-c"),
        help="Training sentences; repeat for several: .txt, .jsonl, .csv/.tsv (a column), STS-B files (both "
             "sentences), 'builtin', or hf://owner/name (a Hub dataset, online). Optional with --pairs. Mix in "
             "stated shares with SPEC:SHARE on every source (docs.jsonl:0.7 builtin:0.3); the PCA targets and the "
             "projection are fitted on the same mix. A source names its own jsonl field or csv column after '#' "
             "(docs.jsonl#body:0.7).")
    pairs: Optional[list[str]] = setting(
        None, path="data", help="Related sentence pairs for the pair loss (the student's cosine of each pair learns "
                                "the teacher's); repeat for several: STS, pair/triplet or NLI files, labels unused. "
                                "Their sentences join the corpus.")
    student: Optional[str] = setting(None, path="model", flags=("--student", "-s"),
                                     help="Student checkpoint. Omit it with --student-layers to heal the teacher cut "
                                          "to L layers. 'static': a static model of the teacher (a token table, "
                                          "model2vec), healed on --corpus if given (a folder named static: "
                                          "./static).")
    student_layers: Union[int, list[int], None] = setting(
        None, flags=("--student-layers", "-l"), cli_type=Optional[str], parse=parse_layers,
        help="Cut the student (default: the teacher) to L layers (4) or to these 0-based layers (0,2,4).")
    select: Select = select_setting()
    corpus_field: Optional[str] = setting(None, help="jsonl field with the text (a record's title, if it has one, "
                                                     "goes in front of its text, as verify embeds BEIR documents), "
                                                     "for the sources that have it and name none (SPEC#FIELD).")
    corpus_column: Optional[str] = setting(None, help="csv/tsv column (header name or 0-based index) with the text, "
                                                      "for the sources that have it and name none (SPEC#COLUMN).")
    max_sentences: Optional[int] = setting(None, min=1, help="Use at most this many corpus sentences (see --sample).")
    sample: CorpusSample = setting(CorpusSample.RANDOM, help="How --max-sentences picks: random (a seeded subset of "
                                   "all sources) or in-order (the --corpus sources in the order given, each whole "
                                   "while it fits: put your in-domain file first).")
    augment: list[str] = setting(default_factory=list, help="Add perturbed copies (offline): word-dropout, "
                                 "span-swap, synonym; repeat or comma-separate. Off by default.")
    augment_copies: int = setting(1, min=1, help="Copies per sentence.")
    pca_samples: int = setting(20000, min=1, help="Teacher embeddings the PCA is fitted on.")
    batch_size: int = setting(64, min=1, help="Sentences per batch (with --pairs: half as many pairs).")
    lr: Optional[float] = setting(None, min=0.0, help="Peak learning rate (AdamW). Default: 5e-5 with --pairs, "
                                  "else 1e-3 when healing a cut teacher, 1e-4 for another student (HPD).")
    max_seq_len: Optional[int] = setting(None, min=8, help="Truncate training texts to this many tokens (the output "
                                         "keeps the student's own limit). Default: chosen from the corpus "
                                         "(--length-percentile).")
    length_percentile: float = setting(99.0, min=50.0, max=100.0, help="Without --max-seq-len: train at this "
                                       "percentile of the corpus's token lengths, rounded up to a multiple of 8 and "
                                       "capped at the student's max length.")
    loss: Optional[Loss] = setting(None, help="mse (HPD), cosine+mse, or rank+mse (+ each text's similarities to "
                                              "the batch's other texts, softmax-matched to the teacher's); with "
                                              "--pairs: pair or pair+mse. Default: pair with --pairs, else mse "
                                              "(docs/methods/shrink-then-heal.md says when to use which).")
    layer_targets: Optional[bool] = setting(None, help="Also match each student layer to its teacher layer (a cut "
                                                       "teacher only; off by default).")
    layer_weight: float = setting(1.0, min=0.0, help="Weight of the layer targets.")
    rank_temperature: float = setting(0.1, min=0.001, max=10.0, help="rank+mse: softmax temperature on the "
                                      "cosines (lower is sharper, and can diverge).")
    projection_init: ProjectionInit = setting(ProjectionInit.PCA_ALIGNED, help="pca-aligned (student PCA rotated "
                                              "onto the teacher's axes) or pca.")
    dropout: bool = setting(False, flags=("--dropout/--no-dropout",),
                            help="Keep the student's dropout while training.")
    static_vocabulary: int = setting(0, min=0, help="With --student static: give the N most frequent corpus words "
                                     "the source has no token for a row of their own (0: the source's tokens only).")
    bucket: bool = bucket_setting()
    freeze_embeddings: bool = setting(False, flags=("--freeze-embeddings/--train-embeddings",),
                                      help="Keep the student's token embeddings as they are: tokens the corpus "
                                           "never shows stay consistent with those it does.")
    eval_retrieval: Optional[str] = setting(
        None, path="data", help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) evaluated after every "
                                "epoch, with --eval-sts or alone: the kept checkpoint has the best mean of its STS "
                                "and nDCG@10 retentions against the teacher. Never the set you report on.")
    heldout: int = setting(256, min=0, help="Corpus sentences kept out of training to report the relative MSE "
                                            "before and after.")
    cache_dir: Optional[str] = setting(None, path="dir", help="Teacher target cache (default: $ESPRESSO_CACHE or "
                                                              "~/.cache/espresso-export).")
    # the trained student's vocabulary pruned as shrink prunes a cut (auto's recipes rebuild a pruned heal with it)
    prune_corpus: Optional[list[str]] = declared_as(ShrinkSettings, "prune_corpus")
    prune_min_count: int = declared_as(ShrinkSettings, "prune_min_count")
    prune_keep_top: Optional[int] = declared_as(ShrinkSettings, "prune_keep_top")
    prune_keep_file: Optional[str] = declared_as(ShrinkSettings, "prune_keep_file")

    def __post_init__(self) -> None:
        check_choices(self)  # choices, bounds, --threads within the machine's CPUs
