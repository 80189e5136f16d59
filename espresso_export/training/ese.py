"""ESE (Espresso Sentence Embeddings): the training objective, as plain torch functions.

A model trained with it can be cut to its first ``L`` layers and first ``k``
dims with no head (seeds 000/003, ``docs/methods.md``). Notation: ``n`` layers,
hidden size ``d``, ``X_i`` the pooled embedding after layer ``i`` (1-based),
``X_i^k`` its first ``k`` dims, ``loss`` a sentence-embedding loss.

* learn-to-express: ``L_le = sum_{i<n} w_i loss(X_i^k) + loss(X_n^k)``;
* learn-to-compress: ``L_lc = sum_{i<n} w_i align(X_i^k, T_i) + align(X_n^k, T_n)``
  with ``align = MSE + KL`` and ``T_i`` the PCA target of :func:`pca_target`;
* total: ``L_task + alpha * L_le + beta * L_lc``.

``L_task = loss(X_n^d)`` is the plain objective on the full-width last layer,
the one a model without ESE is fine-tuned with. The paper's equations do not
write it, but its reference implementation (AnglE's ``AngleESETrainer``)
adds it, and without it nothing trains the full-width output that the uncut
model serves. With ``alpha = beta = 0`` the objective is exactly the control
(plain fine-tuning), which is how the benchmark's control run is made.

Layer weights ``w_i`` (``i`` = absolute layer number, last layer always 1):
``log`` = ``1 / (1 + ln i)`` (the paper's default), ``uniform`` = 1, ``learned``
= ``m * softmax(logits)`` over the ``m`` shallow layers (starts uniform).

Deviations from the reference implementation, on purpose: it sums
``hidden_states[0 .. n-2]``, i.e. the *embedding layer* output with weight 1
and never layer ``n-1``; we use layers ``1 .. n-1`` as the paper writes. It
also divides the shallow-layer sum by ``n - 1``; we keep the paper's plain sum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import torch
import torch.nn.functional as F

from espresso_export.core.errors import ValidationError

DEFAULT_SCALE = 20.0  # 1 / temperature 0.05, the AnglE/CoSENT/SimCSE default


class LayerWeighting(str, Enum):
    LOG = "log"  # w_i = 1 / (1 + ln i): the paper's default
    UNIFORM = "uniform"
    LEARNED = "learned"  # softmax-normalised learnable logits


class SentenceLoss(str, Enum):
    ANGLE = "angle"  # CoSENT cosine term + in-batch negatives + angle term (AnglE)
    COSENT = "cosent"  # ranking of pair cosines by their score
    INFONCE = "infonce"  # in-batch negatives (and hard negatives) with a temperature


# --- layer weights ------------------------------------------------------------------------------------


def log_layer_weights(depth: int, start: int = 1) -> list[float]:
    """``[w_start, ..., w_n]``: ``1 / (1 + ln i)`` for ``i < n``, and 1 for the last layer."""
    if not 1 <= start <= depth:
        raise ValidationError(f"--layers-from must be between 1 and {depth} (the model's depth), got {start}")
    return [1.0 / (1.0 + math.log(i)) for i in range(start, depth)] + [1.0]


# --- similarities of aligned pairs --------------------------------------------------------------------


def cosine_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine of two ``(P, d)`` tensors -> ``(P,)``."""
    return F.cosine_similarity(a, b, dim=-1, eps=1e-8)


def angle_pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """AnglE's angle similarity of two ``(P, d)`` tensors -> ``(P,)``.

    Each embedding is read as a complex vector: first half real part, second
    half imaginary part (``z = a_re + i a_im``, ``w = b_re + i b_im``). The
    normalised complex inner product ``rho = <z, conj(w)> / (|z| |w|)`` has
    ``Re rho = cos(a, b)`` and ``Im rho`` = the normalised rotation between
    them. The score is ``|Re rho + Im rho|``: this is what AnglE's released
    code computes (sum of the real and imaginary parts of the normalised
    quotient ``z / w``) and ranks as a similarity; the paper's prose calls it
    an angle difference, but its sign convention only matches the code's
    reading as a similarity. A ``d`` must be even.
    """
    if a.shape[-1] % 2:
        raise ValidationError(f"the angle loss needs an even embedding width, got {a.shape[-1]}")
    a_re, a_im = a.chunk(2, dim=-1)
    b_re, b_im = b.chunk(2, dim=-1)
    re = (a_re * b_re + a_im * b_im).sum(-1)
    im = (a_im * b_re - a_re * b_im).sum(-1)
    norm = a.norm(dim=-1) * b.norm(dim=-1)
    return ((re + im) / norm.clamp(min=1e-12)).abs()


# --- sentence losses ----------------------------------------------------------------------------------


def ranking_loss(sim: torch.Tensor, scores: torch.Tensor, scale: float = DEFAULT_SCALE) -> torch.Tensor:
    """CoSENT ranking: ``log(1 + sum_{s_i > s_j} exp(scale * (sim_j - sim_i)))``.

    Every pair of pairs whose gold scores are ordered contributes when the
    similarities are in the wrong order; ties in the scores contribute nothing.
    """
    diff = scale * (sim[None, :] - sim[:, None])  # [i, j] = scale * (sim_j - sim_i)
    ordered = scores[:, None] > scores[None, :]
    diff = diff.masked_fill(~ordered, float("-inf"))
    zero = torch.zeros(1, dtype=sim.dtype, device=sim.device)
    return torch.logsumexp(torch.cat([zero, diff.flatten()]), dim=0)


def cosent_loss(a, b, scores, scale: float = DEFAULT_SCALE) -> torch.Tensor:
    return ranking_loss(cosine_pairs(a, b), scores, scale)


def angle_term(a, b, scores, scale: float = DEFAULT_SCALE) -> torch.Tensor:
    return ranking_loss(angle_pairs(a, b), scores, scale)


def infonce_loss(
    anchor: torch.Tensor,
    positive: torch.Tensor,
    negative: torch.Tensor | None = None,
    *,
    scale: float = DEFAULT_SCALE,
    rows: torch.Tensor | None = None,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """In-batch negatives: anchor ``i`` must pick ``positive[i]`` among every positive (and negative) of the batch.

    ``rows`` (bool ``(B,)``) selects the anchors that take part (pairs that are
    positives); ``exclude`` (bool ``(B, C)``) drops candidates that are copies
    of the row's own positive (the same sentence twice in a batch is not a negative).
    Cross-entropy of ``scale * cos`` logits, averaged over the rows taken.
    """
    candidates = positive if negative is None else torch.cat([positive, negative], dim=0)
    logits = scale * (F.normalize(anchor, dim=-1) @ F.normalize(candidates, dim=-1).T)
    if exclude is not None:
        logits = logits.masked_fill(exclude, float("-inf"))
    target = torch.arange(anchor.shape[0], device=anchor.device)
    if rows is not None:
        if not bool(rows.any()):
            return logits.sum() * 0.0  # no positive pair in this batch: no signal, keep the graph
        logits, target = logits[rows], target[rows]
    return F.cross_entropy(logits, target)


@dataclass(frozen=True)
class AngleWeights:
    """Weights and scales of AnglE's three terms (its ``cosine_w``, ``ibn_w``, ``angle_w``)."""

    cosine: float = 1.0
    ibn: float = 1.0
    angle: float = 1.0
    cosine_scale: float = DEFAULT_SCALE
    ibn_scale: float = DEFAULT_SCALE
    angle_scale: float = DEFAULT_SCALE


@dataclass
class PairEmbeddings:
    """Embeddings of one batch: anchors, their positives, optional hard negatives, and the supervision.

    ``scores``: gold similarity of (anchor, positive) for scored pairs, else None.
    ``is_positive``: which (anchor, positive) pairs count as positives for in-batch negatives.
    ``exclude``: ``(B, C)`` candidates to drop from row ``i``'s in-batch negatives.
    """

    anchor: torch.Tensor
    positive: torch.Tensor
    negative: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    is_positive: torch.Tensor | None = None
    exclude: torch.Tensor | None = None

    def first(self, k: int) -> PairEmbeddings:
        """The same batch with every embedding cut to its first ``k`` dims."""
        return PairEmbeddings(
            self.anchor[:, :k], self.positive[:, :k], None if self.negative is None else self.negative[:, :k],
            self.scores, self.is_positive, self.exclude,
        )

    def ranked_pairs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(left, right, scores)`` for the ranking terms, or None when the batch has no order to learn.

        Scored pairs rank by their score; triplets rank (anchor, positive) = 1
        above (anchor, negative) = 0; plain positive pairs have no order.
        """
        if self.scores is not None:
            return self.anchor, self.positive, self.scores
        if self.negative is not None:
            b = self.anchor.shape[0]
            scores = torch.cat([torch.ones(b), torch.zeros(b)]).to(self.anchor)
            return torch.cat([self.anchor, self.anchor]), torch.cat([self.positive, self.negative]), scores
        return None


def sentence_loss(kind: SentenceLoss, emb: PairEmbeddings, weights: AngleWeights = AngleWeights()) -> torch.Tensor:
    """One sentence-embedding loss on one batch (any width)."""
    kind = SentenceLoss(kind)
    ranked = emb.ranked_pairs()

    def contrastive(scale: float) -> torch.Tensor:
        return infonce_loss(emb.anchor, emb.positive, emb.negative, scale=scale, rows=emb.is_positive,
                            exclude=emb.exclude)

    if kind is SentenceLoss.INFONCE:
        return contrastive(weights.ibn_scale)
    if kind is SentenceLoss.COSENT:
        if ranked is None:
            raise ValidationError("--loss cosent needs scored pairs or triplets; plain positive pairs have no ranking")
        return cosent_loss(*ranked, scale=weights.cosine_scale)
    total = emb.anchor.new_zeros(())
    if ranked is not None and weights.cosine:
        total = total + weights.cosine * cosent_loss(*ranked, scale=weights.cosine_scale)
    if weights.ibn:
        total = total + weights.ibn * contrastive(weights.ibn_scale)
    if ranked is not None and weights.angle:
        total = total + weights.angle * angle_term(*ranked, scale=weights.angle_scale)
    return total


# --- learn-to-compress --------------------------------------------------------------------------------


@torch.no_grad()
def pca_target(x: torch.Tensor, k: int, *, align_to: torch.Tensor | None = None) -> torch.Tensor:
    """The compressed target ``X^k_pca`` of a batch of full embeddings ``x`` (``(B, d)`` -> ``(B, k)``), no gradient.

    Formulation: the *batch* dependency matrix. The paper writes, per
    embedding, ``A = softmax(x x^T / sqrt(d))`` (``d x d``) from one ``d x 1``
    vector; we build it from the whole batch ``M`` (``B x d``):
    ``A = softmax(M^T M / sqrt(d))`` (softmax over each row), then
    ``A = U S V^T``, ``A_k = U[:, :k] S[:k, :k]`` and the target ``M A_k``
    (row ``b`` is ``A_k^T x_b``, the paper's Eq. 5). Why the batch form:

    * it is what the authors' released code does (``pca_compress``), i.e. the
      form behind the reported numbers;
    * a per-embedding ``x x^T`` is rank one, so its "top-k components" carry
      one direction plus softmax noise, and every sentence gets its own basis:
      the k target coordinates would mean different things for different rows,
      while one shared basis per batch makes coordinate ``j`` the same
      direction for every sentence, which is what first-k slicing needs;
    * it costs one SVD of a ``d x d`` matrix per layer and step instead of ``B``.

    We use an exact SVD (``torch.linalg.svd``; the reference uses the
    randomised ``svd_lowrank``), so the target is deterministic. Singular
    vectors have arbitrary signs, which would flip target coordinates from
    step to step; with ``align_to`` (the first-k slice it supervises) each
    component's sign is chosen to agree with it, a choice the paper leaves
    open. The whole function runs without gradient: the target is a constant.
    """
    d = x.shape[-1]
    if not 1 <= k <= d:
        raise ValidationError(f"--compression-dim must be between 1 and {d} (the embedding width), got {k}")
    with torch.autocast(device_type=x.device.type, enabled=False):  # SVD needs float32 even under mixed precision
        x = x.detach().float()
        dep = torch.softmax((x.T @ x) / math.sqrt(d), dim=-1)
        u, s, _ = torch.linalg.svd(dep, full_matrices=False)
        target = x @ (u[:, :k] * s[:k])
        if align_to is not None:
            agree = (target * align_to.detach().float()[:, :k]).sum(0)
            target = target * torch.where(agree < 0, -1.0, 1.0).to(target)
    return target


def align_loss(x: torch.Tensor, target: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """``MSE(x, target) + KL(softmax(target / T) || softmax(x / T)) * T^2``; ``target`` must be constant.

    MSE is the mean over elements; KL is summed over the k dims and averaged
    over the batch (``batchmean``); ``T^2`` keeps gradients comparable across
    temperatures (at the default ``T = 1`` it is 1).
    """
    if target.requires_grad:
        raise ValueError("align_loss: the target must be detached (no gradient through the PCA target)")
    mse = F.mse_loss(x, target)
    kl = F.kl_div(F.log_softmax(x / temperature, dim=-1), F.log_softmax(target / temperature, dim=-1),
                  reduction="batchmean", log_target=True)
    return mse + kl * temperature**2


def compress_loss(x: torch.Tensor, k: int, *, temperature: float = 1.0) -> torch.Tensor:
    """``align(X^k, X^k_pca)`` for one layer's batch of full embeddings ``x``."""
    return align_loss(x[:, :k], pca_target(x, k, align_to=x), temperature=temperature)


# --- the objective ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EseConfig:
    loss: SentenceLoss = SentenceLoss.ANGLE
    compression_dim: int = 128  # k
    alpha: float = 1.0  # weight of learn-to-express
    beta: float = 1.0  # weight of learn-to-compress
    layer_weights: LayerWeighting = LayerWeighting.LOG
    layers_from: int = 1  # first (1-based) layer trained by the ESE terms
    kl_temperature: float = 1.0
    angle: AngleWeights = field(default_factory=AngleWeights)

    def to_dict(self) -> dict:
        return {
            "loss": SentenceLoss(self.loss).value, "compression_dim": self.compression_dim, "alpha": self.alpha,
            "beta": self.beta, "layer_weights": LayerWeighting(self.layer_weights).value,
            "layers_from": self.layers_from, "kl_temperature": self.kl_temperature,
            "angle": dict(self.angle.__dict__),
        }


@dataclass
class EseBatch:
    """Texts of one training batch (what :meth:`EseData.collate` returns)."""

    anchor: list[str]
    positive: list[str]
    negative: list[str] | None = None
    scores: list[float] | None = None
    is_positive: list[bool] | None = None

    def __len__(self) -> int:
        return len(self.anchor)

    @property
    def texts(self) -> list[str]:
        """All texts in the order of one forward pass: anchors, positives, negatives."""
        return self.anchor + self.positive + (self.negative or [])

    def exclude_mask(self) -> torch.Tensor:
        """``(B, C)``: candidate ``j`` is a copy of row ``i``'s positive (but not the positive itself)."""
        candidates = self.positive + (self.negative or [])
        return torch.tensor([[c == p and j != i for j, c in enumerate(candidates)] for i, p in enumerate(self.positive)])

    def split(self, x: torch.Tensor) -> PairEmbeddings:
        """Cut the ``(len(texts), d)`` output of one forward pass back into anchors, positives, negatives."""
        b = len(self.anchor)
        dev = x.device
        return PairEmbeddings(
            anchor=x[:b], positive=x[b : 2 * b], negative=x[2 * b : 3 * b] if self.negative else None,
            scores=None if self.scores is None else torch.tensor(self.scores, dtype=x.dtype, device=dev),
            is_positive=None if self.is_positive is None else torch.tensor(self.is_positive, device=dev),
            exclude=self.exclude_mask().to(dev),
        )


class EseObjective(torch.nn.Module):
    """The ESE loss of one batch: ``total, parts = objective.loss(batch)``.

    ``parts`` holds floats for logging: ``task``, ``express``, ``compress``,
    ``total``, and the per-layer values ``express/L{i}``, ``compress/L{i}``.
    With ``layer_weights='learned'`` the objective has parameters: give
    ``objective.parameters()`` to the optimizer with the model's.
    """

    def __init__(self, config: EseConfig, depth: int, hidden_size: int, ckpt=None, *, max_length: int | None = None):
        super().__init__()
        self.config = config
        self.depth = depth
        self.hidden_size = hidden_size
        self.ckpt = ckpt
        self.max_length = max_length  # tokens per text while training (None: the checkpoint's limit)
        k = config.compression_dim
        if not 1 <= k <= hidden_size:
            raise ValidationError(f"--compression-dim must be between 1 and {hidden_size} (the model's hidden size), got {k}")
        if config.alpha < 0 or config.beta < 0:
            raise ValidationError(f"--alpha and --beta must be >= 0, got {config.alpha} and {config.beta}")
        self.layers = list(range(config.layers_from, depth + 1))
        log_layer_weights(depth, config.layers_from)  # validates layers_from
        weighting = LayerWeighting(config.layer_weights)
        n_shallow = len(self.layers) - 1
        self.logits = torch.nn.Parameter(torch.zeros(n_shallow)) if weighting is LayerWeighting.LEARNED else None

    @classmethod
    def from_checkpoint(cls, ckpt, config: EseConfig, *, max_length: int | None = None) -> EseObjective:
        return cls(config, ckpt.depth, ckpt.hidden_size, ckpt=ckpt, max_length=max_length)

    @property
    def uses_layers(self) -> list[int]:
        """Layers whose pooled output the loss reads (1-based; the last is always included)."""
        return self.layers if (self.config.alpha or self.config.beta) else [self.depth]

    def layer_weights(self, grad_scale: float = 1.0) -> dict[int, torch.Tensor]:
        """``{i: w_i}`` for the trained layers; the last layer's weight is 1.

        ``grad_scale`` scales the gradient the learned logits receive (not their value): data-parallel
        ranks that each compute the whole batch's loss pass ``1 / world``."""
        weighting = LayerWeighting(self.config.layer_weights)
        shallow = self.layers[:-1]
        if weighting is LayerWeighting.LOG:
            values = torch.tensor(log_layer_weights(self.depth, self.config.layers_from)[:-1])
        elif weighting is LayerWeighting.UNIFORM:
            values = torch.ones(len(shallow))
        else:
            logits = self.logits if grad_scale == 1.0 else self.logits * grad_scale + self.logits.detach() * (1 - grad_scale)
            values = len(shallow) * torch.softmax(logits, dim=0)
        out = {i: values[j] for j, i in enumerate(shallow)}
        out[self.depth] = torch.tensor(1.0)
        return out

    def compute(self, pooled: Mapping[int, torch.Tensor], batch: EseBatch, *,
                param_grad_scale: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss from pooled per-layer embeddings ``{i: (len(batch.texts), d)}`` (pure; no model).

        ``param_grad_scale`` scales the gradient of the objective's own parameters (see :meth:`layer_weights`)."""
        cfg = self.config
        k = cfg.compression_dim
        last = self.depth
        full = batch.split(pooled[last])
        task = sentence_loss(cfg.loss, full, cfg.angle)
        parts: dict[str, float] = {"task": _f(task)}
        total = task
        if cfg.alpha or cfg.beta:
            weights = self.layer_weights(param_grad_scale)
            express = task.new_zeros(())
            compress = task.new_zeros(())
            for i in self.layers:
                w = weights[i].to(task)
                x = pooled[i]
                if cfg.alpha:
                    term = sentence_loss(cfg.loss, batch.split(x).first(k), cfg.angle)
                    express = express + w * term
                    parts[f"express/L{i}"] = _f(term)
                if cfg.beta:
                    term = compress_loss(x, k, temperature=cfg.kl_temperature)
                    compress = compress + w * term
                    parts[f"compress/L{i}"] = _f(term)
            total = total + cfg.alpha * express + cfg.beta * compress
            parts["express"] = _f(express)
            parts["compress"] = _f(compress)
        parts["total"] = _f(total)
        return total, parts

    def pooled(self, batch: EseBatch) -> dict[int, torch.Tensor]:
        """Forward ``batch``'s texts through the checkpoint (one pass): ``{i: (len(batch.texts), d)}`` for the used layers."""
        from espresso_export.model.embed import pooled_layer_states, tokenize

        if self.ckpt is None:
            raise ValueError("EseObjective.loss needs a checkpoint; use EseObjective.from_checkpoint")
        inputs = tokenize(self.ckpt, batch.texts, self.max_length)
        device = next(self.ckpt.model.parameters()).device
        inputs = {k: v.to(device) for k, v in inputs.items()}
        return pooled_layer_states(self.ckpt, inputs, self.uses_layers)

    def loss(self, batch: EseBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Forward ``batch`` through the checkpoint (one pass, all hidden states) and return the loss."""
        return self.compute(self.pooled(batch), batch)


# --- data ---------------------------------------------------------------------------------------------


class EseData:
    """Training examples for :class:`EseObjective`, from scored pairs or (anchor, positive[, negative]) pairs.

    Index it and :meth:`collate` a list of examples into an :class:`EseBatch`.
    For scored pairs, a pair counts as a positive for in-batch negatives when
    its score is at least ``positive_threshold`` (default: 80% of the way from
    the lowest to the highest score in the file, i.e. 4.0 on STS-B's 0-5 scale).
    """

    def __init__(self, source, *, positive_threshold: float | None = None):
        from espresso_export.data.readers import StsPairs, TextPairs

        self.name = source.name
        if isinstance(source, StsPairs):
            self.anchor, self.positive, self.negative = list(source.sentence1), list(source.sentence2), None
            self.scores: list[float] | None = list(source.scores)
            lo, hi = min(self.scores), max(self.scores)
            self.positive_threshold = positive_threshold if positive_threshold is not None else lo + 0.8 * (hi - lo)
            self.kind = "scored"
        elif isinstance(source, TextPairs):
            self.anchor, self.positive = list(source.anchor), list(source.positive)
            self.negative = None if source.negative is None else list(source.negative)
            self.scores = None
            self.positive_threshold = None
            self.kind = "triplets" if self.negative is not None else "pairs"
        else:
            raise TypeError(f"EseData needs StsPairs or TextPairs, got {type(source).__name__}")

    @classmethod
    def read(cls, path, *, limit: int | None = None, positive_threshold: float | None = None) -> EseData:
        from espresso_export.data.readers import read_training_data

        return cls(read_training_data(path, limit=limit), positive_threshold=positive_threshold)

    def __len__(self) -> int:
        return len(self.anchor)

    def __getitem__(self, i: int) -> tuple:
        return (self.anchor[i], self.positive[i], None if self.negative is None else self.negative[i],
                None if self.scores is None else self.scores[i])

    def collate(self, items: Sequence[tuple]) -> EseBatch:
        anchor = [it[0] for it in items]
        positive = [it[1] for it in items]
        negative = [it[2] for it in items] if self.negative is not None else None
        if self.scores is None:
            return EseBatch(anchor, positive, negative, None, None)
        scores = [float(it[3]) for it in items]
        return EseBatch(anchor, positive, None, scores, [s >= self.positive_threshold for s in scores])

    def describe(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "examples": len(self)}
        if self.positive_threshold is not None:
            d["positive_threshold"] = self.positive_threshold
        return d


def check_loss_fits(config: EseConfig, data: EseData) -> None:
    """Refuse combinations that cannot train (before any model work)."""
    if SentenceLoss(config.loss) is SentenceLoss.COSENT and data.kind == "pairs":
        raise ValidationError("--loss cosent needs scored pairs or triplets; these are plain positive pairs "
                              "(use --loss infonce or angle)")
    if SentenceLoss(config.loss) is not SentenceLoss.COSENT and data.kind == "scored":
        n_pos = sum(s >= data.positive_threshold for s in data.scores or [])
        if n_pos == 0:
            raise ValidationError(f"no pair scores >= {data.positive_threshold:g}, so in-batch negatives have no "
                                  "positives; lower the positive threshold or use --loss cosent")


def _f(t: torch.Tensor) -> float:
    return float(t.detach())
