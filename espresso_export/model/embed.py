"""Sentence embeddings from a :class:`~espresso_export.checkpoint.Checkpoint`.

Tokenise in length-sorted batches, run the backbone, pool, then apply the
sentence-transformers post modules (Dense layers, Normalize), exactly as
``SentenceTransformer.encode`` would for the same folder.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from espresso_export.model.checkpoint import Checkpoint, DenseLayer, PostModule
from espresso_export.core.progress import track
from espresso_export.core.types import Pooling


def pool(token_embeddings, attention_mask, mode: Pooling):
    """Pool ``(batch, seq, dim)`` token states into ``(batch, dim)``; padding is ignored."""
    import torch

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
        return token_embeddings[torch.arange(token_embeddings.shape[0]), last]
    raise ValueError(f"unknown pooling {mode}")


def apply_post(x, modules: Sequence[PostModule]):
    """Run pooled embeddings through Dense / Normalize modules in order."""
    import torch

    for m in modules:
        if isinstance(m, DenseLayer):
            x = torch.nn.functional.linear(x, m.weight.to(x.dtype), None if m.bias is None else m.bias.to(x.dtype))
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


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Indices grouped into batches of similar length (longest first), to waste little padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


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


def model_inputs(model) -> frozenset[str]:
    """The tokenizer outputs this model's forward accepts (decoders take no token_type_ids)."""
    import inspect

    accepted = inspect.signature(model.forward).parameters
    return frozenset(n for n in ("input_ids", "attention_mask", "token_type_ids") if n in accepted)


def _forward(ckpt: Checkpoint, batch, hidden_states: bool):
    names = model_inputs(ckpt.model)
    inputs = {k: v for k, v in batch.items() if k in names}
    return ckpt.model(**inputs, output_hidden_states=hidden_states, return_dict=True)


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
    import torch

    texts = list(texts)
    out: np.ndarray | None = None
    lengths = [len(t) for t in texts]
    batches = list(length_sorted_batches(lengths, batch_size))
    with torch.inference_mode():
        for idx in track(batches, description=progress, total_items=len(texts), count=len):
            batch = tokenize(ckpt, [texts[i] for i in idx], max_length)
            states = _forward(ckpt, batch, hidden_states=False).last_hidden_state
            emb = pool(states, batch["attention_mask"], ckpt.pooling)
            if post:
                emb = apply_post(emb, ckpt.post)
            arr = emb.float().cpu().numpy()
            if out is None:
                out = np.empty((len(texts), arr.shape[1]), dtype=np.float32)
            out[idx] = arr
    if out is None:
        return np.zeros((0, ckpt.output_dim), dtype=np.float32)
    return out


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
    import torch

    texts = list(texts)
    out: dict[int, np.ndarray] = {}
    batches = list(length_sorted_batches([len(t) for t in texts], batch_size))
    with torch.inference_mode():
        for idx in track(batches, description=progress, total_items=len(texts), count=len):
            batch = tokenize(ckpt, [texts[i] for i in idx], max_length)
            pooled = pooled_layer_states(ckpt, batch, layers)
            for layer in layers:
                arr = pooled[layer].float().cpu().numpy()
                if layer not in out:
                    out[layer] = np.empty((len(texts), arr.shape[1]), dtype=np.float32)
                out[layer][idx] = arr
    return out


def pooled_layer_states(ckpt: Checkpoint, batch, layers: Sequence[int]) -> dict:
    """``{L: (batch, hidden) tensor}``: pooled states after each of ``layers`` (1-based) from one forward pass.

    Runs in the caller's grad mode, so training can backpropagate through it.
    For decoder families the final norm is applied to intermediate states, as
    the model cut to ``L`` layers would; ``hidden_states[n]`` already has it.
    """
    final_norm = getattr(ckpt.model, ckpt.arch.final_norm) if ckpt.arch.final_norm else None
    n = ckpt.depth
    hs = _forward(ckpt, batch, hidden_states=True).hidden_states
    out = {}
    for layer in layers:
        state = hs[layer]
        if final_norm is not None and layer < n:
            state = final_norm(state)
        out[layer] = pool(state, batch["attention_mask"], ckpt.pooling)
    return out
