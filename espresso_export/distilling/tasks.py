"""Phase 4 of ``distill``: the training objectives, as :class:`~espresso_export.training.loop.TrainingTask`.

:class:`HealTask` pulls the projected student ``h_s`` towards the teacher's PCA targets ``h_t`` (relative MSE,
optionally + cosine, or + the in-batch ranking term :func:`rank_kl`), and with layer targets each student
layer's pooled state towards the teacher's pooled state after the matching layer (standardised per dimension).
:class:`PairHealTask` instead pulls the student's cosine of each related pair towards the cosine of the
teacher's targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from espresso_export.core.types import Loss
from espresso_export.model.checkpoint import Checkpoint
from espresso_export.model.embed import (
    TokenizedTexts, apply_post, encode_batches, model_inputs, pool, to_device, tokenize,
)
from espresso_export.model.post import DenseLayer, renormalized, with_head
from espresso_export.distilling.targets import TeacherTargets
from espresso_export.training.loop import TrainingTask


def rows_on(array: np.ndarray, idx: np.ndarray, device):
    """Rows ``idx`` of a (memory-mapped) target array as float32 on ``device`` (an asynchronous copy on CUDA)."""
    import torch

    rows = torch.from_numpy(np.asarray(array[idx], dtype=np.float32))  # host: staged, then moved below
    return rows.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else rows.to(device)


def rank_kl(h_s, h_t, temperature: float):
    """Mean over the rows of KL(teacher || student) between softmaxes of each row's cosines to the other rows.

    In-batch relational distillation: the student learns how the teacher ranks the batch's other texts against
    each text (what retrieval uses), not only where each vector lies. Written here because no library ships
    this loss over precomputed teacher targets; 0 for a batch of one text."""
    import torch
    import torch.nn.functional as F

    n = h_s.shape[0]
    if n < 2:
        return h_s.sum() * 0.0
    eye = torch.eye(n, dtype=torch.bool, device=h_s.device)

    def log_probs(h):
        v = F.normalize(h.float(), dim=1)
        return F.log_softmax((v @ v.T / temperature).masked_fill(eye, -1e4), dim=1)  # a row never ranks itself

    log_t, log_s = log_probs(h_t), log_probs(h_s)
    return (log_t.exp() * (log_t - log_s)).sum(1).mean()


class HealTask(TrainingTask):
    """The HPD objective as a :class:`~espresso_export.training.task.TrainingTask`."""

    def __init__(self, student: Checkpoint, projection, sentences: Sequence[str], targets: TeacherTargets, *,
                 loss: Loss = Loss.MSE, layer_map: dict[int, int] | None = None, layer_weight: float = 1.0,
                 rank_temperature: float = 0.1,
                 max_seq_len: int = 128, dropout: bool = False, selection=None, identity: dict | None = None,
                 items: Sequence[int] | None = None):
        import torch

        self.student = student
        self.projection = projection
        self.sentences = list(sentences)
        self.items = np.arange(len(self.sentences)) if items is None else np.asarray(items)  # trained-on indices
        self.targets = targets
        self.loss_kind = Loss(loss)
        self.layer_map = dict(layer_map or {})  # student layer j (0-based) -> teacher layer index
        self.layer_weight = layer_weight
        self.rank_temperature = rank_temperature
        self.max_seq_len = max_seq_len
        self.dropout = dropout
        self.selection = selection  # a Selection (the eval sets and the score), or None: no evaluation
        self._identity = identity or {}
        self.post = renormalized(student.post)
        self.inputs = model_inputs(student.model)
        self.target_energy = float(np.mean(np.square(targets.targets[: min(len(self.sentences), 65536)], dtype=np.float64))
                                   * targets.targets.shape[1])
        self.layer_stats = {}  # host: moved to the training device on the first step
        for j, t in self.layer_map.items():
            sample = np.asarray(targets.layers[t][: min(len(self.sentences), 65536)], dtype=np.float32)
            mean = sample.mean(0)
            std = sample.std(0) + 1e-3 * float(sample.std(0).mean()) + 1e-6
            self.layer_stats[j] = (torch.from_numpy(mean), torch.from_numpy(std))
        self.history_mse: list[float] = []
        self._tokens: TokenizedTexts | None = None  # the corpus tokenised at the training length

    def __len__(self) -> int:
        return len(self.items)

    def modules(self) -> dict[str, Any]:
        return {"student": self.student.model, "projection": self.projection}

    def lengths(self) -> list[int]:
        return [len(self.sentences[i]) for i in self.items]

    def config(self) -> dict:
        return self._identity

    @property
    def device(self):
        return self.projection.weight.device

    def forward(self, texts: Sequence[str], *, max_len: int | None = None, hidden: bool = False):
        """``(h_s, per-layer pooled states or None)`` for ``texts``."""
        return self._project(tokenize(self.student, texts, max_len), hidden=hidden)

    def _project(self, batch, hidden: bool = False):
        """``(h_s, per-layer pooled states or None)`` for a tokenised batch."""
        batch = to_device(batch, self.inputs, self.device)  # no-op for a batch encode_batches already moved
        out = self.student.model(**batch, output_hidden_states=hidden, return_dict=True)
        mask = batch["attention_mask"]
        emb = apply_post(pool(out.last_hidden_state, mask, self.student.pooling), self.post)
        h = self.projection(emb)
        states = None
        if hidden:
            states = {j: pool(out.hidden_states[j + 1], mask, self.student.pooling) for j in self.layer_map}
        return h, states

    def loss(self, batch: Sequence[int]):
        idx = np.sort(self.items[np.asarray(batch)])
        h_s, states, h_t = self._train_forward(idx, hidden=bool(self.layer_map))
        loss = self._pointwise(idx, h_s, states, h_t)
        if self.loss_kind.in_batch:
            loss = loss + rank_kl(h_s, h_t, self.rank_temperature)
        return loss

    def shard_loss(self, batch: Sequence[int], part: Sequence[int], dist):
        """The ranking term couples a batch's texts: each rank forwards its slice, gathers the other slices'
        ``h_s`` (as constants) and computes the term over the whole global batch, so the ranks' gradients sum
        to the single-process gradient (the per-text terms keep the default share)."""
        if not self.loss_kind.in_batch:
            return super().shard_loss(batch, part, dist)
        import torch

        parts = [np.sort(self.items[np.asarray(batch[a:b], dtype=np.int64)]) for a, b in dist.shard_bounds(len(batch))]
        mine = parts[dist.rank]
        idx = mine if len(mine) else np.sort(self.items[np.asarray(batch[:1])])  # an empty slice forwards a dummy
        h_s, states, h_t = self._train_forward(idx, hidden=bool(self.layer_map))
        point = self._pointwise(idx, h_s, states, h_t) * (len(mine) / len(batch))
        joined = torch.cat(dist.gather_rows(h_s[: len(mine)], [len(p) for p in parts]))
        targets = rows_on(self.targets.targets, np.concatenate(parts), joined.device)
        rank = rank_kl(joined, targets, self.rank_temperature)
        return point + rank - rank.detach() * (1 - 1 / dist.world)  # value: a 1/world share; gradient: this rank's

    def _pointwise(self, idx: np.ndarray, h_s, states, h_t):
        """The loss terms that are means over the texts ``idx`` (MSE, cosine, layer targets)."""
        import torch
        import torch.nn.functional as F

        loss = self._mse(h_s, h_t)
        if self.loss_kind is Loss.COSINE_MSE:
            loss = loss + (1 - F.cosine_similarity(h_s, h_t, dim=1)).mean()
        if self.layer_map:
            layer_losses = []
            for j, t in self.layer_map.items():
                if self.layer_stats[j][0].device != h_s.device:  # moved once, on the first step
                    self.layer_stats[j] = tuple(s.to(h_s.device) for s in self.layer_stats[j])
                mean, std = self.layer_stats[j]
                target = rows_on(self.targets.layers[t], idx, h_s.device)
                layer_losses.append((((states[j].float() - target) / std) ** 2).mean())
            loss = loss + self.layer_weight * torch.stack(layer_losses).mean()
        return loss

    def _train_forward(self, idx: np.ndarray, hidden: bool = False):
        """``(h_s, layer states, h_t)`` for the corpus sentences ``idx``, in training mode."""
        if not self.dropout:
            self.student.model.eval()
        if self._tokens is None:  # once, at the first step: the loop then never waits on the tokenizer
            self._tokens = TokenizedTexts(self.student, self.sentences, self.max_seq_len)
        h_s, states = self._project(self._tokens.batch(idx), hidden=hidden)
        h_t = rows_on(self.targets.targets, idx, h_s.device)
        return h_s.float(), states, h_t

    def _mse(self, h_s, h_t):
        return ((h_s - h_t) ** 2).sum(1).mean() / self.target_energy  # relative: 1.0 = predicting the mean

    @property
    def ckpt_post(self) -> list:
        """The post modules of the finished model: base post, the projection as Dense, Normalize."""
        w = self.projection.weight.detach().float().cpu().clone()
        b = self.projection.bias.detach().float().cpu().clone()
        return with_head(self.post, DenseLayer(weight=w, bias=b, activation="torch.nn.modules.linear.Identity"))

    def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        """``h_s`` of ``texts`` in inference mode (the shared encode loop, at the student's own max length)."""
        texts = list(texts)
        out = np.empty((len(texts), self.projection.out_features), dtype=np.float32)

        def project(batch) -> np.ndarray:
            return self._project(batch)[0].float().cpu().numpy()

        for idx, h in encode_batches(self.student, texts, project, batch_size=batch_size,
                                     max_length=self.student.max_seq_length):
            out[idx] = h
        return out

    def mse(self, indices: Sequence[int]) -> float:
        """Relative MSE of the current student on the corpus items ``indices`` (1.0 = predicting the mean)."""
        idx = np.sort(np.asarray(indices))
        h = self.embed([self.sentences[i] for i in idx])
        return float(np.square(h - np.asarray(self.targets.targets[idx])).sum(1).mean() / self.target_energy)

    @property
    def score_label(self) -> str:
        """With a retrieval set the score is a mean retention x100, not a Spearman: the progress lines say so."""
        if self.selection is None or self.selection.retrieval is None:
            return "eval"
        return "eval (100 x mean retention)"

    def evaluate(self) -> float | None:
        if self.selection is None or (self.selection.sts is None and self.selection.retrieval is None):
            return None
        return self.selection.evaluate(self.embed)


class PairHealTask(HealTask):
    """HPD on related pairs: the student's cosine of each pair is pulled to the cosine of the teacher's targets.

    Items are pairs (rows of ``pairs``: two sentence indices); ``Loss.PAIR_MSE`` adds the MSE on both sentences.
    """

    item_unit = "pairs"

    def __init__(self, *args, pairs: np.ndarray, **kwargs):
        super().__init__(*args, **kwargs)
        self.pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)

    def __len__(self) -> int:
        return len(self.pairs)

    def lengths(self) -> list[int]:
        return [len(self.sentences[a]) + len(self.sentences[b]) for a, b in self.pairs]

    def loss(self, batch: Sequence[int]):
        import torch.nn.functional as F

        idx = self.pairs[np.asarray(batch)].reshape(-1)  # a0 b0 a1 b1 ...
        h_s, _, h_t = self._train_forward(idx)
        s, t = F.normalize(h_s, dim=1), F.normalize(h_t, dim=1)
        loss = ((s[0::2] * s[1::2]).sum(1) - (t[0::2] * t[1::2]).sum(1)).pow(2).mean()
        if self.loss_kind is Loss.PAIR_MSE:
            loss = loss + self._mse(h_s, h_t)
        return loss
