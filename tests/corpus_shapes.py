"""Corpora of every shape a user has, written small: titled records, passages of several sentences, one short text
a line (plain and gzipped, with repeats), Chinese text, one word a line, five documents, a BEIR folder without
qrels, and JSON Lines whose text is not a string. Words from the tiny models' vocabulary, so they encode."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from tiny_models import _WORDS

SHAPES = ("titled", "passages", "lines", "lines-gz", "cjk", "cjk-many", "words", "five", "beir-no-qrels")
CJK = ["我喜欢在公园里散步和看书，天气很好的时候。", "今天的天气非常好，我们去海边游泳吧。", "这家餐厅的菜很好吃，价格也不贵，推荐大家来。",
       "他每天早上六点起床，然后去跑步锻炼身体。", "图书馆里有很多有趣的书，学生们都喜欢来这里。", "我的朋友明天要去北京出差，下周才回来。",
       "孩子们在学校里学习音乐和数学，非常认真。", "这条河很长，河边有很多高大的树。", "晚上我们一起吃饭，然后看了一场电影。",
       "她用电脑写了一封很长的信给她的老师。", "城市里的汽车太多了，交通每天都很慢。", "我的猫每天都在窗户旁边睡觉晒太阳。"]


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


def short_lines(n: int = 150, seed: int = 3, repeats: int = 20) -> list[str]:
    """One-sentence texts of 6-14 words (most have 10+, for halves), the first ``repeats`` repeated at the end."""
    rng = random.Random(seed)
    lines = [sentence(rng, 6, 14) for _ in range(n)]
    return lines + lines[:repeats]


def cjk_lines(n: int = 150, seed: int = 3) -> list[str]:
    """``n`` distinct Chinese texts of two clauses each (10+ characters): enough for a search's sample and heals."""
    rng = random.Random(seed)
    clauses = [c.strip("。") for text in CJK for c in text.split("，")]
    found: dict[str, None] = {}
    while len(found) < n:
        found[f"{rng.choice(clauses)}，{rng.choice(clauses)}。"] = None
    return list(found)


def write_shape(shape: str, folder: Path) -> Path:
    """The corpus of ``shape`` written under ``folder``: its file, or its folder for a BEIR shape."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    if shape == "titled":
        path = folder / "titled.jsonl"
        path.write_text("".join(json.dumps({"_id": str(i), "title": sentence(rng, 2, 3),
                                            "text": sentence(rng, 6, 9) + "."}) + "\n" for i in range(60)))
    elif shape == "passages":
        path = folder / "passages.txt"
        path.write_text("".join(" ".join(sentence(rng, 6, 9).capitalize() + "." for _ in range(3)) + "\n"
                                for _ in range(60)))
    elif shape in ("lines", "lines-gz"):
        text = "\n".join(short_lines()) + "\n"
        path = folder / ("lines.txt" if shape == "lines" else "lines.txt.gz")
        path.write_bytes(text.encode() if shape == "lines" else gzip.compress(text.encode()))
    elif shape == "cjk":
        path = folder / "cjk.txt"
        path.write_text("\n".join(CJK * 2) + "\n", encoding="utf-8")  # each text twice: 12 repeats
    elif shape == "cjk-many":
        path = folder / "cjk-many.txt"
        path.write_text("\n".join(cjk_lines()) + "\n", encoding="utf-8")
    elif shape == "words":
        path = folder / "words.txt"
        path.write_text("\n".join(_WORDS) + "\n")
    elif shape == "five":
        path = folder / "five.txt"
        path.write_text("\n".join(sentence(rng, 10, 14) for _ in range(5)) + "\n")
    elif shape == "beir-no-qrels":
        path = folder / "beir"
        path.mkdir(exist_ok=True)
        path.joinpath("corpus.jsonl").write_text("".join(
            json.dumps({"_id": f"d{i}", "title": sentence(rng, 2, 3), "text": sentence(rng, 6, 9) + "."}) + "\n"
            for i in range(60)))
        path.joinpath("queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "dog runs"}) + "\n")
    else:
        raise ValueError(shape)
    return path


NOT_TEXT = {"nan": "NaN", "number": "12", "list": '[1, {"a": 1}]', "object": '{"a": 1}', "true": "true"}


def write_not_text(kind: str, folder: Path) -> Path:
    """A jsonl whose second record's ``text`` is ``NOT_TEXT[kind]`` (written as JSON: NaN as Python's json reads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}.jsonl"
    path.write_text('{"text": "the dog runs fast in the city today"}\n'
                    f'{{"text": {NOT_TEXT[kind]}}}\n'
                    '{"text": "a cat sleeps on the big red car"}\n')
    return path
