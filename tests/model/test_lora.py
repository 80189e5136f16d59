"""LoRA on a tiny decoder: only adapters train, the ESE loss drops, and merging gives a plain model."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft", reason="the lora extra (peft) is not installed")

from espresso_export.model.bidirectional import switch  # noqa: E402
from espresso_export.model.checkpoint import load  # noqa: E402
from espresso_export.model.embed import encode  # noqa: E402
from espresso_export.finetuning.ese import EseBatch, EseConfig, EseObjective  # noqa: E402
from espresso_export.model.lora import LoraSettings, add_lora, merge_lora, trainable_parameters  # noqa: E402


def test_lora_trains_adapters_only_and_merges(tiny_models, tmp_path):
    torch.manual_seed(0)
    ckpt = load(tiny_models["qwen2"])
    switch(ckpt, "all")
    base = {n: p.detach().clone() for n, p in ckpt.model.named_parameters()}
    wrapper = add_lora(ckpt, LoraSettings(r=4, alpha=8, dropout=0.0))
    trainable, total = trainable_parameters(ckpt.model)
    assert 0 < trainable < total / 4
    assert all("lora_" in n for n, p in ckpt.model.named_parameters() if p.requires_grad)

    objective = EseObjective.from_checkpoint(ckpt, EseConfig(compression_dim=16))
    batch = EseBatch(["a man plays the guitar", "the dog runs", "a child reads a book", "the car is red"],
                     ["a man plays music", "a cat sleeps", "a kid reads", "the river is blue"],
                     scores=[4.8, 0.4, 4.1, 0.2], is_positive=[True, False, True, False])
    opt = torch.optim.AdamW([p for p in ckpt.model.parameters() if p.requires_grad], lr=1e-2)
    ckpt.model.eval()
    with torch.no_grad():
        before, _ = objective.loss(batch)
    for _ in range(6):
        opt.zero_grad()
        total_loss, _ = objective.loss(batch)
        total_loss.backward()
        opt.step()
    with torch.no_grad():
        after, _ = objective.loss(batch)
    assert float(after) < float(before)
    frozen = {n.replace("base_layer.", ""): p for n, p in ckpt.model.named_parameters() if "lora_" not in n}
    assert all(torch.equal(frozen[n], base[n]) for n in base)  # the base weights did not move

    texts = batch.texts
    adapted = encode(ckpt, texts)
    merge_lora(ckpt, wrapper)
    assert not any("lora" in n for n, _ in ckpt.model.named_parameters())
    merged = encode(ckpt, texts)
    assert torch.allclose(torch.from_numpy(adapted), torch.from_numpy(merged), atol=1e-5)
    ckpt.model.save_pretrained(str(tmp_path / "m"))
    ckpt.tokenizer.save_pretrained(str(tmp_path / "m"))
    reloaded = load(tmp_path / "m")  # plain weights, bidirectional switch kept
    assert torch.allclose(torch.from_numpy(encode(reloaded, texts)), torch.from_numpy(merged), atol=1e-5)
