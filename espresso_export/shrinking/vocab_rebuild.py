"""Apply a vocabulary plan: renumber ``tokenizer.json``, rebuild the tokenizer, slice the embedding table.

Every id is renumbered with the map ``new id -> old id`` (``old_ids``): the
model vocabulary, BPE merges, added tokens, post-processor and padding ids of
the tokenizer, the embedding rows, and the special-token ids of the config.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from espresso_export.core.errors import UnsupportedModelError
from espresso_export.model.vocabulary import full_vocab, tokenizer_json
from espresso_export.shrinking.vocab_rules import merge_pairs, merged

_CONFIG_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
                     "unk_token_id", "mask_token_id", "decoder_start_token_id")


# --- tokenizer.json ---------------------------------------------------------------------------------------


def _remap_processor(proc: dict | None, new_id: dict[int, int]) -> dict | None:
    if not proc:
        return proc
    kind = proc.get("type")
    if kind == "Sequence":
        proc["processors"] = [_remap_processor(p, new_id) for p in proc.get("processors", [])]
    elif kind == "TemplateProcessing":
        for spec in (proc.get("special_tokens") or {}).values():
            spec["ids"] = [new_id[i] for i in spec["ids"]]
    elif kind in ("RobertaProcessing", "BertProcessing"):
        for key in ("sep", "cls"):
            token, old = proc[key]
            proc[key] = [token, new_id[old]]
    return proc


def _restrict_model(model: dict, old_ids: Sequence[int], new_id: dict[int, int]) -> None:
    """The tokenizer model's vocabulary (and BPE merges) restricted to ``old_ids``, in place."""
    if model["type"] == "Unigram":
        pieces = model["vocab"]
        model["vocab"] = [pieces[i] for i in old_ids if i < len(pieces)]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id[model["unk_id"]]
        return
    vocab = model["vocab"]
    model["vocab"] = {t: new_id[i] for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i in new_id}
    if model["type"] == "BPE":  # only the merges whose two parts and result are kept
        kept = model["vocab"]
        prefix = model.get("continuing_subword_prefix") or ""
        model["merges"] = [[a, b] for a, b in merge_pairs(model)
                           if a in kept and b in kept and merged(a, b, prefix) in kept]


def rebuild_tokenizer_json(tj: dict, old_ids: Sequence[int]) -> dict:
    """``tj`` restricted to ``old_ids`` (``old_ids[new id] = old id``), every id renumbered."""
    new_id = {old: new for new, old in enumerate(old_ids)}
    out = copy.deepcopy(tj)
    _restrict_model(out["model"], old_ids, new_id)
    for t in out.get("added_tokens") or []:
        t["id"] = new_id[int(t["id"])]
    out["post_processor"] = _remap_processor(out.get("post_processor"), new_id)
    padding = out.get("padding")
    if padding and padding.get("pad_id") is not None:
        padding["pad_id"] = new_id.get(padding["pad_id"], padding["pad_id"])
    return out


def rebuild_hf_tokenizer(tokenizer, new_tj: dict):
    """A tokenizer of the same class over ``new_tj``: saved, its tokenizer.json replaced, and loaded back."""
    from transformers import AutoTokenizer

    work = Path(tempfile.mkdtemp(prefix="espresso-prune-tok-"))
    try:
        tokenizer.save_pretrained(str(work))
        for f in work.iterdir():  # vocab files of the old vocabulary would contradict tokenizer.json
            if f.name not in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                f.unlink()
        (work / "tokenizer.json").write_text(json.dumps(new_tj, ensure_ascii=False), encoding="utf-8")
        cfg_file = work / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        decoder = cfg.get("added_tokens_decoder")
        if decoder:
            by_content = {t["content"]: t["id"] for t in new_tj.get("added_tokens") or []}
            cfg["added_tokens_decoder"] = {str(by_content[v["content"]]): v for v in decoder.values()
                                           if v.get("content") in by_content}
        cfg.pop("vocab_file", None)
        cfg_file.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
        tokenizer = AutoTokenizer.from_pretrained(str(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _check_rebuilt(tokenizer, new_tj)
    return tokenizer


def _check_rebuilt(tokenizer, new_tj: dict) -> None:
    got = tokenizer_json(tokenizer)
    want_vocab, got_vocab = full_vocab(new_tj), full_vocab(got)
    if got_vocab != want_vocab:
        raise UnsupportedModelError(
            f"the rebuilt {type(tokenizer).__name__} does not keep the pruned vocabulary "
            f"({len(got_vocab)} tokens instead of {len(want_vocab)}); this tokenizer class cannot be pruned"
        )


def save_vocab_files(tokenizer, folder: Path) -> list[str]:
    """The vocabulary files of the tokenizer's model (vocab.txt; vocab.json + merges.txt), beside tokenizer.json."""
    backend = tokenizer.backend_tokenizer
    if json.loads(backend.to_str())["model"]["type"] == "Unigram":
        return []  # a sentencepiece .model cannot be written without sentencepiece; tokenizer.json is complete
    return [Path(f).name for f in backend.model.save(str(folder))]


# --- the model ---------------------------------------------------------------------------------------------


def config_token_ids(config) -> list[int]:
    """The special-token ids a transformers config names (pad, bos, eos, ...): they must be kept."""
    return [v for v in (getattr(config, n, None) for n in _CONFIG_TOKEN_IDS) if isinstance(v, int) and v >= 0]


def _remap_config_ids(config, new_id: dict[int, int]) -> None:
    for name in _CONFIG_TOKEN_IDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value in new_id:
            setattr(config, name, new_id[value])


def position_padding_idx(model) -> int | None:
    """RoBERTa/MPNet/XLM-R number positions from the pad id: that id must not move."""
    embeddings = getattr(model, "embeddings", None)
    idx = getattr(embeddings, "padding_idx", None)
    return idx if isinstance(idx, int) else None


def slice_embeddings(model, old_ids: Sequence[int]) -> None:
    """Keep the rows ``old_ids`` of the input embedding table, in that order; ``config.vocab_size`` follows."""
    import torch

    emb = model.get_input_embeddings()
    if not isinstance(emb, torch.nn.Embedding):
        raise UnsupportedModelError(f"cannot prune: the input embeddings are a {type(emb).__name__}, not nn.Embedding")
    rows = emb.num_embeddings
    if old_ids and max(old_ids) >= rows:
        raise UnsupportedModelError(f"the tokenizer has id {max(old_ids)} but the embedding table only {rows} rows")
    new_id = {old: new for new, old in enumerate(old_ids)}
    padding_idx = new_id.get(emb.padding_idx) if emb.padding_idx is not None else None
    table = torch.nn.Embedding(len(old_ids), emb.embedding_dim, padding_idx=padding_idx,
                               dtype=emb.weight.dtype, device=emb.weight.device)
    with torch.no_grad():
        table.weight.copy_(emb.weight[torch.as_tensor(list(old_ids), device=emb.weight.device)])
    model.set_input_embeddings(table)
    model.config.vocab_size = len(old_ids)
    _remap_config_ids(model.config, new_id)
