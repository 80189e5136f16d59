"""Sentence embeddings from a :class:`~espresso_export.model.checkpoint.Checkpoint`.

Tokenise in length-sorted batches, run the backbone, pool, then apply the
sentence-transformers post modules (Dense layers, Normalize), exactly as
``SentenceTransformer.encode`` would for the same folder.

:func:`encode_batches` is the one PyTorch encode loop: :func:`encode`,
:func:`encode_layers` (and through it the distill teacher pass) and the
distill student's evaluation all run through it, with the batch plan of
:mod:`espresso_export.core.batching` that the ONNX runtime uses too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from espresso_export.core.batching import length_sorted_batches
from espresso_export.core.progress import track
from espresso_export.core.signals import check_budget
from espresso_export.core.types import Pooling
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, PostModule


def pool(token_embeddings, attention_mask, mode: Pooling):
    """Pool ``(batch, seq, dim)`` token states into ``(batch, dim)``; padding is ignored.

    bf16/fp16 states (mixed precision) are pooled in fp32: a bf16 sum over a long text keeps 3 digits."""
    import torch

    if token_embeddings.dtype in (torch.bfloat16, torch.float16):
        token_embeddings = token_embeddings.float()
    mask = attention_mask.to(token_embeddings.dtype).unsqueeze(-1)
    if mode is Pooling.CLS:
        return token_embeddings[:, 0]
    if mode is Pooling.MEAN:
        return (token_embeddings * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    if mode is Pooling.MAX:
        return token_embeddings.masked_fill(mask == 0, torch.finfo(token_embeddings.dtype).min).max(1).values
    if mode is Pooling.LAST_TOKEN:
        # works for left and right padding: the last position whose mask is 1
        seq = attention_mask.shape[1]
        positions = torch.arange(seq, device=attention_mask.device).expand_as(attention_mask)
        last = (positions * attention_mask).argmax(1)
        return token_embeddings[torch.arange(token_embeddings.shape[0], device=last.device), last]
    raise ValueError(f"unknown pooling {mode}")


def apply_post(x, modules: Sequence[PostModule]):
    """Run pooled embeddings through Dense / Normalize modules in order."""
    import torch

    for m in modules:
        if isinstance(m, DenseLayer):
            weight, bias = (None if t is None else t.to(device=x.device, dtype=x.dtype) for t in (m.weight, m.bias))
            x = torch.nn.functional.linear(x, weight, bias)
            x = _activation(m.activation)(x)
        else:
            x = torch.nn.functional.normalize(x, dim=-1)
    return x


def _activation(name: str):
    import torch

    short = name.rsplit(".", 1)[-1]
    table = {"Identity": lambda t: t, "Tanh": torch.tanh, "ReLU": torch.relu, "GELU": torch.nn.functional.gelu,
             "Sigmoid": torch.sigmoid}
    if short not in table:
        from espresso_export.core.errors import UnsupportedModelError

        raise UnsupportedModelError(f"unsupported Dense activation {name!r}; supported: {', '.join(table)}")
    return table[short]


def tokenize(ckpt: Checkpoint, texts: Sequence[str], max_length: int | None = None):
    if ckpt.do_lower_case:
        texts = [t.lower() for t in texts]
    return ckpt.tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=max_length or ckpt.max_seq_length,
        return_tensors="pt",
    )


class TokenizedTexts:
    """Texts tokenised once, whole (the tokenizer's fast path over every text), padded per batch on request.

    :meth:`batch` returns what :func:`tokenize` returns for the same texts (same ids, padding side, pad values
    and attention mask), without running the tokenizer in the training loop, where it would hold up the device.
    The ids are kept flat in numpy arrays, so a large corpus costs a few bytes per token."""

    def __init__(self, ckpt: Checkpoint, texts: Sequence[str], max_length: int | None = None):
        tok = ckpt.tokenizer
        if ckpt.do_lower_case:
            texts = [t.lower() for t in texts]
        enc = tok(list(texts), padding=False, truncation=True, max_length=max_length or ckpt.max_seq_length)
        self.lengths = np.fromiter((len(x) for x in enc["input_ids"]), dtype=np.int64, count=len(texts))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.keys = [k for k in enc.keys() if k in ("input_ids", "attention_mask", "token_type_ids")]
        self.flat = {k: np.fromiter((v for row in enc[k] for v in row), dtype=np.int64, count=int(self.offsets[-1]))
                     for k in self.keys}
        self.pad = {"input_ids": tok.pad_token_id if tok.pad_token_id is not None else 0, "attention_mask": 0,
                    "token_type_ids": getattr(tok, "pad_token_type_id", 0)}
        self.left = getattr(tok, "padding_side", "right") == "left"

    def batch(self, idx: Sequence[int]) -> dict:
        """The padded ``(len(idx), longest)`` int64 tensors of the texts ``idx``."""
        import torch

        longest = int(self.lengths[np.asarray(idx, dtype=np.int64)].max()) if len(idx) else 0
        out = {}
        for k in self.keys:
            arr = np.full((len(idx), longest), self.pad[k], dtype=np.int64)
            for r, i in enumerate(idx):
                row = self.flat[k][self.offsets[i] : self.offsets[i + 1]]
                if self.left:
                    arr[r, longest - len(row) :] = row
                else:
                    arr[r, : len(row)] = row
            out[k] = torch.from_numpy(arr)  # host: a tokenised batch, as tokenize() returns it
        return out


def model_inputs(model) -> frozenset[str]:
    """The tokenizer outputs this model's forward accepts (decoders take no token_type_ids)."""
    return _accepted_inputs(type(model))


@functools.lru_cache(maxsize=64)
def _accepted_inputs(cls) -> frozenset[str]:
    """Per class: reading a signature costs more than a small batch's forward on a GPU."""
    import inspect

    accepted = inspect.signature(cls.forward).parameters
    return frozenset(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted)


def model_device(model):
    """The device of ``model``'s parameters (where its inputs must be): the CPU for a model without any."""
    import torch

    return next((p.device for p in model.parameters()), torch.device("cpu"))


def to_device(batch, names: frozenset[str], device) -> dict:
    """The entries ``names`` of a tokenised batch on ``device``: the copies run asynchronously from pinned
    memory on CUDA, so the host tokenises the next batch while the device computes."""
    out = {}
    for k, v in batch.items():
        if k in names:
            pin = device.type == "cuda" and v.device.type == "cpu"  # a batch already there is left as it is
            out[k] = (v.pin_memory() if pin else v).to(device, non_blocking=pin)
    return out


def _forward(ckpt: Checkpoint, batch, hidden_states: bool):
    names = model_inputs(ckpt.model)
    inputs = {k: v for k, v in batch.items() if k in names}
    return ckpt.model(**inputs, output_hidden_states=hidden_states, return_dict=True)


def encode_batches(
    ckpt: Checkpoint,
    texts: Sequence[str],
    compute: Callable[[Any], Any],
    *,
    batch_size: int = 32,
    max_length: int | None = None,
    progress: str | None = None,
) -> Iterator[tuple[list[int], Any]]:
    """The encode loop: ``(indices, compute(tokenised batch))`` per length-sorted batch of ``texts``.

    ``compute`` runs under ``torch.inference_mode`` on a batch already on the model's device, holding the inputs
    the model accepts, and should return numpy arrays (the consumer's code between batches runs outside it).
    Batches are planned over all of ``texts`` (:mod:`espresso_export.core.batching`). Inside a time budget
    (:func:`~espresso_export.core.signals.interrupt_after`) it stops between batches once the budget is spent.
    """
    import torch

    texts = list(texts)
    batches = length_sorted_batches([len(t) for t in texts], batch_size)
    names, device = model_inputs(ckpt.model), model_device(ckpt.model)
    for idx in track(batches, description=progress, total_items=len(texts), count=len):
        check_budget()
        batch = to_device(tokenize(ckpt, [texts[i] for i in idx], max_length), names, device)
        with torch.inference_mode():
            result = compute(batch)
        yield idx, result


def _store(out: dict, key, rows: list[int], arr: np.ndarray, n: int) -> None:
    """Write ``arr`` into rows ``rows`` of the float32 ``(n, width)`` array ``out[key]``, created on first use."""
    if key not in out:
        out[key] = np.empty((n, arr.shape[1]), dtype=np.float32)
    out[key][rows] = arr


def encode(
    ckpt: Checkpoint,
    texts: Sequence[str],
    *,
    batch_size: int = 32,
    max_length: int | None = None,
    post: bool = True,
    progress: str | None = None,
) -> np.ndarray:
    """Final sentence embeddings (float32, shape ``(n, ckpt.output_dim)``)."""

    def final(batch) -> np.ndarray:
        states = _forward(ckpt, batch, hidden_states=False).last_hidden_state
        emb = pool(states, batch["attention_mask"], ckpt.pooling)
        return (apply_post(emb, ckpt.post) if post else emb).float().cpu().numpy()

    texts = list(texts)
    out: dict = {}
    for idx, arr in encode_batches(ckpt, texts, final, batch_size=batch_size, max_length=max_length,
                                   progress=progress):
        _store(out, None, idx, arr, len(texts))
    return out.get(None, np.zeros((0, ckpt.output_dim), dtype=np.float32))


def encode_layers(
    ckpt: Checkpoint,
    texts: Sequence[str],
    layers: Sequence[int],
    *,
    batch_size: int = 32,
    max_length: int | None = None,
    progress: str | None = None,
) -> dict[int, np.ndarray]:
    """Pooled embeddings after each of ``layers`` (1-based depth) from one forward pass.

    ``result[L]`` is what the model cut to its first ``L`` layers outputs
    (pooled, before any Dense or Normalize): for decoder families the final
    norm is applied to the intermediate state, as the cut model would.
    """

    def pooled(batch) -> dict[int, np.ndarray]:
        states = pooled_layer_states(ckpt, batch, layers)
        return {layer: states[layer].float().cpu().numpy() for layer in layers}

    texts = list(texts)
    out: dict[int, np.ndarray] = {}
    for idx, arrays in encode_batches(ckpt, texts, pooled, batch_size=batch_size, max_length=max_length,
                                      progress=progress):
        for layer, arr in arrays.items():
            _store(out, layer, idx, arr, len(texts))
    return out


def pooled_layer_states(ckpt: Checkpoint, batch, layers: Sequence[int]) -> dict:
    """``{L: (batch, hidden) tensor}``: pooled states after each of ``layers`` (1-based) from one forward pass.

    Runs in the caller's grad mode, so training can backpropagate through it.
    For decoder families the final norm is applied to intermediate states, as
    the model cut to ``L`` layers would; ``hidden_states[n]`` already has it. Only the last layer wanted (the
    plain teacher pass, a control run): the forward keeps no intermediate states.
    """
    final_norm = getattr(ckpt.model, ckpt.arch.final_norm) if ckpt.arch.final_norm else None
    n = ckpt.depth
    if list(layers) == [n]:
        return {n: pool(_forward(ckpt, batch, hidden_states=False).last_hidden_state, batch["attention_mask"],
                        ckpt.pooling)}
    hs = _forward(ckpt, batch, hidden_states=True).hidden_states
    out = {}
    for layer in layers:
        state = hs[layer]
        if final_norm is not None and layer < n:
            state = final_norm(state)
        out[layer] = pool(state, batch["attention_mask"], ckpt.pooling)
    return out
