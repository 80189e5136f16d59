"""The distill training batches come from the corpus tokenised once: the same tensors the tokenizer gives a batch."""

from __future__ import annotations

import pytest
import torch

from espresso_export.model.checkpoint import load
from espresso_export.model.embed import TokenizedTexts, tokenize

TEXTS = ["a man plays the guitar", "the dog", "A Child reads a very long book about the history of the world again",
         "x", "the car is red, isn't it?", ""]


@pytest.mark.parametrize("family,side", [("bert", "right"), ("qwen2", "right"), ("qwen2", "left"), ("llama", "left")])
@pytest.mark.parametrize("max_length", [None, 6])
def test_a_pre_tokenised_batch_equals_the_tokenizers(tiny_models, family, side, max_length):
    ckpt = load(tiny_models[family])
    ckpt.tokenizer.padding_side = side
    tokens = TokenizedTexts(ckpt, TEXTS, max_length)
    for idx in ([0, 1, 2], [3], [4, 2, 0, 1, 5], list(range(len(TEXTS)))):
        got, want = tokens.batch(idx), tokenize(ckpt, [TEXTS[i] for i in idx], max_length)
        assert set(got) == set(want), (set(got), set(want))
        for k in want:
            assert torch.equal(got[k], want[k]), (k, idx, got[k], want[k])


def test_lower_casing_checkpoints_are_lowered_first(tiny_bert):
    ckpt = load(tiny_bert)
    ckpt.do_lower_case = True
    got = TokenizedTexts(ckpt, TEXTS).batch([2])
    assert torch.equal(got["input_ids"], tokenize(ckpt, [TEXTS[2]])["input_ids"])
