"""The settings of ``distill`` and ``train``, declared once: the API, the commands and the recipe steps derive
from these classes (:mod:`espresso_export.core.settings`). The options every trainer shares are declared by one
function each, so ``distill`` and ``train`` cannot drift apart. Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from espresso_export.core.parsing import parse_layers
from espresso_export.core.settings import check_choices, setting
from espresso_export.core.types import Attention, CorpusSample, Loss, Pooling, ProjectionInit, Select
from espresso_export.shrinking.settings import (
    attention_setting, pooling_setting, seed_setting, select_setting, trust_remote_code_setting,
)

SENTENCE_LOSSES = ("angle", "cosent", "infonce")  # training.ese.SentenceLoss
LAYER_WEIGHTINGS = ("log", "uniform", "learned")  # training.ese.LayerWeighting


# --- shared by every trainer: declared once, in the base class both settings classes extend ---------------------

@dataclass
class TrainerSettings:
    """The options every trainer has, with the same meaning and default (``distill`` and ``train``)."""

    epochs: int = setting(1, min=1, help="Passes over the training data.")
    warmup: float = setting(0.1, min=0.0, max=1.0, help="Fraction of steps of linear warm-up.")
    weight_decay: float = setting(0.01, min=0.0, help="AdamW weight decay.")
    max_grad_norm: float = setting(1.0, min=0.0, help="Gradient clipping norm.")
    max_steps: Optional[int] = setting(None, min=1, help="Stop after this many steps.")
    eval_sts: Optional[str] = setting(None, path="data", help="STS file evaluated after every epoch; the best "
                                      "checkpoint is kept. Never the test split you report on.")
    eval_limit: Optional[int] = setting(None, min=2, help="Evaluate on N pairs taken evenly over the set (as verify's "
                                                           "--sts-limit; files are often sorted by score).")
    seed: int = seed_setting()
    device: str = setting("cpu", help="cpu, cuda or mps.")
    amp: str = setting("auto", help="Mixed precision: auto, off, bf16, fp16. auto is on for CUDA and, for distill "
                                    "(training and the teacher pass), bf16 on a CPU with bf16 instructions "
                                    "(AVX512-BF16, AMX, Arm BF16): a heal measured 1.5x faster there.")
    threads: Optional[int] = setting(None, min=1, cpus=True, recipe=False,
                                     help="CPU threads for torch (a recipe sets them once, at the top).")
    checkpoint_every: int = setting(200, min=0, help="Save a resumable checkpoint every N steps (0: only at epoch "
                                                     "ends and on Ctrl-C).")
    keep_checkpoints: bool = setting(False, help="Keep the run folder after success.")
    pooling: Optional[Pooling] = pooling_setting()
    trust_remote_code: bool = trust_remote_code_setting()


@dataclass
class DistillSettings(TrainerSettings):
    """:func:`espresso_export.training.distill.distill`: HPD, or shrink-then-heal a cut teacher."""

    dim: Optional[int] = setting(None, min=1, flags=("--dim", "-d"), help="Embedding width d of the student (PCA of the "
                                                                   "teacher).")
    corpus: Optional[list[str]] = setting(
        None, path="data", flags=("--corpus", "-c"),
        help="Training sentences; repeat for several: .txt, .jsonl, .csv/.tsv (a column), STS-B files (both "
             "sentences), 'builtin', or hf://owner/name (a Hub dataset, online). Optional with --pairs. Mix in "
             "stated shares with SPEC:SHARE on every source (docs.jsonl:0.7 builtin:0.3); the PCA targets and the "
             "projection are fitted on the same mix.")
    pairs: Optional[list[str]] = setting(
        None, path="data", help="Related sentence pairs for the pair loss (the student's cosine of each pair learns "
                                "the teacher's); repeat for several: STS, pair/triplet or NLI files, labels unused. "
                                "Their sentences join the corpus.")
    student: Optional[str] = setting(None, path="model", flags=("--student", "-s"),
                                     help="Student checkpoint. Omit it with --student-layers to heal the teacher cut "
                                          "to L layers.")
    student_layers: Union[int, list[int], None] = setting(
        None, flags=("--student-layers", "-l"), cli_type=Optional[str], parse=parse_layers,
        help="Cut the student (default: the teacher) to L layers (4) or to these 0-based layers (0,2,4).")
    select: Select = select_setting()
    corpus_field: Optional[str] = setting(None, help="jsonl field with the text (a record's title, if it has one, "
                                                     "goes in front of its text, as verify embeds BEIR documents).")
    corpus_column: Optional[str] = setting(None, help="csv/tsv column (header name or 0-based index) with the text.")
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
                                              "the batch's other texts, softmax-matched to the teacher's; measured "
                                              "worse than mse for search); with --pairs: pair or pair+mse. "
                                              "Default: pair with --pairs, else mse.")
    layer_targets: Optional[bool] = setting(None, help="Also match each student layer to its teacher layer (a cut "
                                                       "teacher only; off by default).")
    layer_weight: float = setting(1.0, min=0.0, help="Weight of the layer targets.")
    rank_temperature: float = setting(0.1, min=0.001, max=10.0, help="rank+mse: softmax temperature on the "
                                      "cosines (lower is sharper; 0.05 made all-mpnet-base-v2 L4 diverge).")
    projection_init: ProjectionInit = setting(ProjectionInit.PCA_ALIGNED, help="pca-aligned (student PCA rotated "
                                              "onto the teacher's axes) or pca.")
    dropout: bool = setting(False, flags=("--dropout/--no-dropout",),
                            help="Keep the student's dropout while training.")
    bucket: bool = setting(True, help="Length-bucketed batches (less padding).")
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

    def __post_init__(self) -> None:
        check_choices(self)  # choices, bounds, --threads within the machine's CPUs


@dataclass
class TrainSettings(TrainerSettings):
    """:func:`espresso_export.training.esetrain.train_ese`: ESE (``ese``) or plain fine-tuning of the last layer."""

    ese: bool = setting(False, flags=("--ese/--no-ese",), help="Train every layer's first-k dims (ESE). Without it: "
                                                              "plain fine-tuning of the last layer.")
    loss: str = setting("angle", choices=SENTENCE_LOSSES, help="angle (AnglE: cosine + in-batch negatives + angle), cosent, or infonce.")
    compression_dim: int = setting(128, min=1, flags=("--compression-dim", "-k"),
                                   help="k: the leading dims ESE trains to carry the meaning.")
    alpha: float = setting(1.0, min=0.0, help="Weight of learn-to-express.")
    beta: float = setting(1.0, min=0.0, help="Weight of learn-to-compress.")
    layer_weights: str = setting("log", choices=LAYER_WEIGHTINGS, help="log (1/(1+ln i)), uniform, or learned.")
    layers_from: int = setting(1, min=1, help="First layer (1-based) ESE trains.")
    positive_threshold: Optional[float] = setting(
        None, help="Scored pairs at or above this score are positives for in-batch negatives (default: 80% of the "
                   "score range, 4.0 on STS-B).")
    data_limit: Optional[int] = setting(None, min=2, help="Use the first N examples.")
    attention: Optional[Attention] = attention_setting()
    lora: bool = setting(False, help="Train LoRA adapters only (needs the `lora` extra); merged into the weights at "
                                     "the end.")
    lora_r: int = setting(32, min=1, help="LoRA rank (alpha = rank).")
    batch_size: int = setting(32, min=1, help="Examples per batch.")
    lr: float = setting(2e-5, min=0.0, help="Peak learning rate (AdamW).")
    max_seq_len: Optional[int] = setting(None, min=8, help="Truncate training texts to this many tokens.")

    def __post_init__(self) -> None:
        check_choices(self)

    def build(self) -> dict:
        """The keyword arguments of :func:`~espresso_export.training.esetrain.train_ese` these settings stand for:
        the objective, the trainer's configuration, LoRA and the data/eval options."""
        from espresso_export.training.ese import EseConfig, LayerWeighting, SentenceLoss
        from espresso_export.training.loop import TrainConfig

        objective = EseConfig(loss=SentenceLoss(self.loss), compression_dim=self.compression_dim,
                              alpha=self.alpha if self.ese else 0.0, beta=self.beta if self.ese else 0.0,
                              layer_weights=LayerWeighting(self.layer_weights), layers_from=self.layers_from)
        training = TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, warmup=self.warmup,
                               weight_decay=self.weight_decay, max_grad_norm=self.max_grad_norm,
                               max_steps=self.max_steps, amp=self.amp, seed=self.seed,
                               checkpoint_every=self.checkpoint_every, device=self.device)
        lora = None
        if self.lora:
            from espresso_export.model.lora import LoraSettings

            lora = LoraSettings(r=self.lora_r, alpha=self.lora_r)
        return {"objective": objective, "training": training, "eval_sts": self.eval_sts, "eval_limit": self.eval_limit,
                "data_limit": self.data_limit, "positive_threshold": self.positive_threshold,
                "max_seq_len": self.max_seq_len, "attention": self.attention, "lora": lora, "pooling": self.pooling,
                "keep_checkpoints": self.keep_checkpoints, "trust_remote_code": self.trust_remote_code}
