"""The decoder attention switch: exactly the chosen layers change, padding is respected, and it survives a reload."""

from __future__ import annotations

import json

import pytest
import torch

from espresso_export.model.bidirectional import (
    CONFIG_FIELD,
    apply,
    bidirectional_layers,
    describe,
    make_bidirectional,
    switch,
)
from espresso_export.model.checkpoint import load
from espresso_export.core.errors import ValidationError
from espresso_export.core.types import Pooling

TEXTS = ["the dog runs in the city today", "a cat sleeps"]  # different lengths: the batch is padded


def _hidden(ckpt, texts=TEXTS):
    from espresso_export.model.embed import tokenize

    batch = tokenize(ckpt, texts)
    batch.pop("token_type_ids", None)
    with torch.no_grad():
        out = ckpt.model(**batch, output_hidden_states=True)
    return out.hidden_states, batch["attention_mask"]


def _changed(a, b, mask=None):
    """Max abs difference over real (non-padding) tokens."""
    diff = (a - b).abs()
    if mask is not None:
        diff = diff * mask.unsqueeze(-1)
    return float(diff.max())


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_last_only_changes_only_the_last_layer(tiny_models, family):
    ckpt = load(tiny_models[family])
    before, mask = _hidden(ckpt)
    n = ckpt.depth
    assert make_bidirectional(ckpt.model, "last") == [n - 1]
    after, _ = _hidden(ckpt)
    for i in range(n):  # embeddings and layers 1..n-1: untouched
        assert _changed(before[i], after[i], mask) == 0.0, f"hidden state {i} changed"
    # the last layer changes, already at token 0 (which attends only to itself when causal)
    assert _changed(before[n][:, 0], after[n][:, 0]) > 1e-4
    assert getattr(ckpt.model.config, "is_causal", True) is True  # the config-wide switch is not used for one layer


@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3", "mistral"])
def test_all_layers_change_from_layer_one(tiny_models, family):
    ckpt = load(tiny_models[family])
    before, mask = _hidden(ckpt)
    make_bidirectional(ckpt.model, "all")
    after, _ = _hidden(ckpt)
    assert _changed(before[0], after[0], mask) == 0.0  # token embeddings
    for i in range(1, ckpt.depth + 1):
        assert _changed(before[i][:, 0], after[i][:, 0]) > 1e-4, f"layer {i}: token 0 did not change"
    assert ckpt.model.config.is_causal is False
    # undo restores the causal model exactly
    make_bidirectional(ckpt.model, "causal")
    again, _ = _hidden(ckpt)
    assert all(_changed(b, a, mask) == 0.0 for b, a in zip(before, again))


@pytest.mark.parametrize("mode", ["all", "last"])
def test_padding_is_respected_and_eager_equals_sdpa(tiny_models, mode):
    """A sentence embeds the same alone or padded in a batch, with eager and SDPA attention."""
    from espresso_export.model.embed import encode

    results = {}
    for impl in ("sdpa", "eager"):
        ckpt = load(tiny_models["qwen2"])
        ckpt.model.config._attn_implementation = impl
        switch(ckpt, mode)
        assert ckpt.pooling is Pooling.MEAN
        batched = encode(ckpt, TEXTS, batch_size=2)
        alone = encode(ckpt, TEXTS[1:], batch_size=1)
        assert torch.allclose(torch.from_numpy(batched[1]), torch.from_numpy(alone[0]), atol=1e-5)
        results[impl] = batched
    assert torch.allclose(torch.from_numpy(results["sdpa"]), torch.from_numpy(results["eager"]), atol=1e-5)


def test_switch_survives_save_and_reload(tiny_models, tmp_path):
    from transformers import AutoModel

    for mode in ("all", "last"):
        ckpt = load(tiny_models["llama"])
        make_bidirectional(ckpt.model, mode)
        want, mask = _hidden(ckpt)
        out = tmp_path / mode
        ckpt.model.save_pretrained(str(out))
        ckpt.tokenizer.save_pretrained(str(out))
        config = json.loads((out / "config.json").read_text())
        assert config[CONFIG_FIELD][-1] == "bidirectional"
        reloaded = load(out)  # espresso-export re-installs it
        assert reloaded.pooling is Pooling.MEAN
        got, _ = _hidden(reloaded)
        assert _changed(want[-1], got[-1], mask) < 1e-6
        plain = AutoModel.from_pretrained(str(out)).eval()  # plain transformers
        with torch.no_grad():
            batch = {k: v for k, v in reloaded.tokenizer(TEXTS, padding=True, return_tensors="pt").items()
                     if k != "token_type_ids"}
            plain_last = plain(**batch).last_hidden_state
        if mode == "all":  # config.is_causal = False: reproduced without espresso-export
            assert config["is_causal"] is False
            assert _changed(want[-1], plain_last, mask) < 1e-6
        else:  # one layer needs the hooks: plain transformers is causal until apply()
            assert _changed(want[-1], plain_last, mask) > 1e-4
            assert apply(plain) == [reloaded.depth - 1]
            with torch.no_grad():
                assert _changed(want[-1], plain(**batch).last_hidden_state, mask) < 1e-6


def test_cut_keeps_the_record_consistent(tiny_models):
    from espresso_export.shrinking.slicing import cut

    ckpt = load(tiny_models["qwen2"])
    make_bidirectional(ckpt.model, "last")
    assert describe(ckpt.model)["mode"] == "last"
    cut(ckpt.model, ckpt.arch, [0, 1])  # the bidirectional last layer is dropped
    assert getattr(ckpt.model.config, CONFIG_FIELD) == ["causal", "causal"]
    assert bidirectional_layers(ckpt.model) == [] and describe(ckpt.model) is None
    ckpt = load(tiny_models["qwen2"])
    make_bidirectional(ckpt.model, [1, 3])
    cut(ckpt.model, ckpt.arch, [1, 2, 3])
    assert bidirectional_layers(ckpt.model) == [0, 2]


def test_refusals(tiny_models):
    with pytest.raises(ValidationError, match="decoder"):
        make_bidirectional(load(tiny_models["bert"]).model, "all")
    ckpt = load(tiny_models["qwen2"])
    with pytest.raises(ValidationError, match="out of range"):
        make_bidirectional(ckpt.model, [7])
    setattr(ckpt.model.config, CONFIG_FIELD, ["causal"])
    with pytest.raises(ValidationError, match="lists 1 layers"):
        apply(ckpt.model)


def test_ese_trains_a_bidirectional_decoder(tiny_models):
    from espresso_export.finetuning.ese import EseBatch, EseConfig, EseObjective

    ckpt = load(tiny_models["qwen2"])
    switch(ckpt, "all")
    objective = EseObjective.from_checkpoint(ckpt, EseConfig(compression_dim=16))
    batch = EseBatch(["a man plays the guitar", "the dog runs"], ["a man plays music", "a cat sleeps"],
                     scores=[4.8, 0.4], is_positive=[True, False])
    total, parts = objective.loss(batch)
    total.backward()
    grads = [p.grad for p in ckpt.model.layers[0].parameters()]
    assert all(g is not None for g in grads) and parts["compress"] > 0


def test_shrink_a_decoder_with_the_switch(tiny_models, tmp_path):
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.shrink import shrink

    out = tmp_path / "q2"
    result = shrink(tiny_models["qwen2"], out, layers=2, attention="last")  # spread keeps layers 1 and 3
    assert result.layers == [1, 3] and result.pooling is Pooling.MEAN
    config = json.loads((out / "config.json").read_text())
    assert config[CONFIG_FIELD] == ["causal", "bidirectional"]
    assert json.loads((out / "espresso.json").read_text())["attention"]["mode"] == "last"
    reloaded = load(out)
    want = encode(result.checkpoint, TEXTS)
    assert torch.allclose(torch.from_numpy(encode(reloaded, TEXTS)), torch.from_numpy(want), atol=1e-6)
