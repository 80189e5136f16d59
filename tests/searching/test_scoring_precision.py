"""``auto`` encodes for scoring at the precision distill's teacher pass uses (``--amp``), times candidates at full
precision on the CPU (the answer is deployed as float32 or int8), and keeps searches of other precisions apart."""

from __future__ import annotations

import json

import pytest
import torch

from espresso_export.searching import candidates as C
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.work import fingerprint
from espresso_export.training.schedule import cpu_auto_amp, encoding_precision, full_precision


def _state() -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")


def test_scoring_runs_at_the_teacher_pass_precision():
    with encoding_precision("bf16", "cpu"):
        assert _state() == (True, torch.bfloat16)
    with encoding_precision("off", "cpu"):
        assert not _state()[0]
    with encoding_precision("auto", "cpu"):  # bf16 exactly where distill's teacher pass runs in bf16
        assert _state()[0] == (cpu_auto_amp("auto", "cpu") == "bf16")


def test_full_precision_turns_an_outer_autocast_off():
    with encoding_precision("bf16", "cpu"):
        with full_precision():
            assert not _state()[0]
        assert _state()[0]


def test_candidates_are_timed_in_float32_while_the_search_encodes_in_bf16(tiny_bert):
    from espresso_export.model.checkpoint import load
    from espresso_export.shrinking.shrink import shrink

    source = load(tiny_bert)
    cut = shrink(str(tiny_bert), None, layers=1, progress=False).checkpoint
    seen: list[bool] = []
    hooks = [m.model.register_forward_pre_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
             for m in (source, cut)]
    with encoding_precision("bf16", "cpu"):
        ratio = C.time_ratio(source, cut, ["a short text", "another one here"] * 8, rounds=1)
    for h in hooks:
        h.remove()
    assert ratio > 0 and len(seen) == 4 and not any(seen)


def test_searches_at_other_precisions_do_not_share_work(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"_id": "1", "text": "One. Two."}) + "\n", encoding="utf-8")
    prints = {amp: fingerprint("src", AutoSettings(corpus=[str(docs)], amp=amp)) for amp in ("auto", "off", "bf16")}
    assert len(set(prints.values())) == 3


@pytest.mark.parametrize("amp", ["auto", "off"])
def test_heals_and_their_recipe_train_at_the_search_precision(tmp_path, amp):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"_id": "1", "text": "One. Two."}) + "\n", encoding="utf-8")
    s = AutoSettings(corpus=[str(docs)], amp=amp)
    kw = C.heal_settings(C.Candidate("L1", 1, layers=[0]), texts=64, heal_texts=32, heal_file=tmp_path / "h.txt",
                         dim=8, settings=s, cache_dir=tmp_path / "cache")
    assert kw.get("amp", "auto") == amp  # distill's default is auto: the recipe names only another
