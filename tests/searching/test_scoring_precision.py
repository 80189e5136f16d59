"""``auto`` encodes for scoring at the precision distill's teacher pass uses (``--amp``), one autocast region per
pass, times candidates at full precision on the CPU (the answer is deployed as float32 or int8), and keeps searches
of other precisions apart."""

from __future__ import annotations

import json

import pytest
import torch

from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import Candidate
from espresso_export.searching.encoding import source_pass, time_ratio, timed_vectors
from espresso_export.searching.heals import heal_settings
from espresso_export.searching.work import fingerprint
from espresso_export.training.schedule import cpu_auto_amp, encoding_precision


def _state() -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")


def test_scoring_runs_at_the_teacher_pass_precision():
    with encoding_precision("bf16", "cpu"):
        assert _state() == (True, torch.bfloat16)
    with encoding_precision("off", "cpu"):
        assert not _state()[0]
    with encoding_precision("auto", "cpu"):  # bf16 exactly where distill's teacher pass runs in bf16
        assert _state()[0] == (cpu_auto_amp("auto", "cpu") == "bf16")


def test_each_encoding_pass_runs_in_bf16_and_leaves_no_autocast_open(tmp_path, tiny_bert):
    """The search's passes encode in bf16 when asked, each in its own autocast region: a heal run after them
    (or between them) must not train inside one, where torch keeps the weights cast at its first step."""
    from espresso_export.model.checkpoint import load
    from espresso_export.searching.scoring import draw_sample, read_documents

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"_id": str(i), "text": f"Doc {i} has words. It says {i} more things."})
                            + "\n" for i in range(12)), encoding="utf-8")
    sample = draw_sample(read_documents([str(docs)]), size=12, queries=4, seed=0, method="sentence")
    source = load(tiny_bert)
    seen: list[tuple[bool, torch.dtype]] = []
    hook = source.model.register_forward_pre_hook(lambda *_: seen.append(_state()))
    source_pass(source, sample, [1], ("bf16", "cpu"))
    timed_vectors(source, sample, ("bf16", "cpu"))
    assert seen and all(s == (True, torch.bfloat16) for s in seen)
    assert not torch.is_autocast_enabled("cpu")
    seen.clear()
    timed_vectors(source, sample, ("off", "cpu"))
    hook.remove()
    assert seen and not any(s[0] for s in seen)


def test_candidates_are_timed_in_float32_on_the_cpu(tiny_bert):
    from espresso_export.model.checkpoint import load
    from espresso_export.shrinking.shrink import shrink

    source = load(tiny_bert)
    cut = shrink(str(tiny_bert), None, layers=1, progress=False).checkpoint
    seen: list[bool] = []
    hooks = [m.model.register_forward_pre_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
             for m in (source, cut)]
    ratio = time_ratio(source, cut, ["a short text", "another one here"] * 8, rounds=1)
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
    kw = heal_settings(Candidate("L1", 1, layers=[0]), texts=64, heal_texts=32, heal_file=tmp_path / "h.txt",
                         dim=8, settings=s, cache_dir=tmp_path / "cache")
    assert kw.get("amp", "auto") == amp  # distill's default is auto: the recipe names only another
