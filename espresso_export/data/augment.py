"""Offline text augmentation for distillation corpora (off by default).

HPD enlarges its corpus with perturbed copies of the sentences; the teacher
then labels the copies like any other sentence. Everything here is local and
seeded: no network, no model, the same ``seed`` gives the same copies.

* ``word-dropout``: drop each word with probability ``p`` (at least one word kept);
* ``span-swap``: swap two non-overlapping spans of 1-3 words;
* ``synonym``: replace words found in a small hand-written synonym list.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from enum import Enum

from espresso_export.core.errors import ValidationError


class Augment(str, Enum):
    WORD_DROPOUT = "word-dropout"
    SPAN_SWAP = "span-swap"
    SYNONYM = "synonym"


# Written for this project: common, unambiguous words and close substitutes.
_SYNONYM_GROUPS = (
    "big large huge", "small little tiny", "fast quick rapid", "slow sluggish", "happy glad cheerful",
    "sad unhappy upset", "angry mad furious", "smart clever bright", "easy simple", "hard difficult tough",
    "begin start commence", "end finish complete", "buy purchase", "help assist aid", "show display present",
    "look glance gaze", "talk speak chat", "say state tell", "walk stroll", "run jog sprint", "jump leap hop",
    "eat consume", "drink sip", "sleep rest nap", "house home residence", "car automobile vehicle",
    "street road avenue", "shop store", "child kid youngster", "man guy gentleman", "woman lady",
    "people persons folks", "dog puppy hound", "cat kitten", "picture photo image", "movie film",
    "job work occupation", "city town", "road path way", "rock stone", "trash garbage rubbish",
    "beautiful pretty lovely", "ugly unattractive", "old elderly aged", "new fresh recent", "rich wealthy",
    "poor needy", "strong powerful", "weak feeble", "quiet silent calm", "loud noisy", "cold chilly cool",
    "hot warm", "wet damp moist", "dry arid", "shout yell scream", "laugh giggle chuckle", "cry weep sob",
    "near close nearby", "far distant remote", "often frequently", "maybe perhaps possibly", "also too likewise",
    "mistake error", "answer reply response", "ask inquire", "choose pick select", "gift present",
    "trip journey voyage", "test exam", "friend pal buddy", "stop halt cease", "try attempt", "need require",
    "want desire wish", "get obtain receive", "give provide offer", "make create build", "fix repair mend",
    "break smash shatter", "cut slice chop", "throw toss hurl", "hold grip grasp", "pull drag tug",
    "push shove press", "wash clean rinse", "cook prepare", "sofa couch", "bag sack", "shirt top",
    "hat cap", "boat ship vessel", "plane aircraft airplane", "bike bicycle", "kitchen cookhouse",
    "guitar instrument", "ocean sea", "hill mountain", "forest woods", "garden yard", "pond lake",
    "grass lawn", "meal dinner", "tasty delicious", "funny amusing humorous", "strange odd weird",
    "correct right accurate", "wrong incorrect", "large big", "start begin", "sick ill unwell",
)
SYNONYMS: dict[str, list[str]] = {}
for _group in _SYNONYM_GROUPS:
    _words = _group.split()
    for _w in _words:
        SYNONYMS.setdefault(_w, [])
        SYNONYMS[_w] += [o for o in _words if o != _w and o not in SYNONYMS[_w]]

_WORD = re.compile(r"\S+")


def parse_augment(names: Sequence[str | Augment]) -> list[Augment]:
    out = []
    for name in names:
        for part in str(getattr(name, "value", name)).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                out.append(Augment(part))
            except ValueError as e:
                raise ValidationError(f"unknown augmentation {part!r}; choose from "
                                      + ", ".join(a.value for a in Augment)) from e
    return list(dict.fromkeys(out))


def word_dropout(sentence: str, rng: random.Random, p: float = 0.1) -> str:
    words = sentence.split()
    if len(words) < 2:
        return sentence
    kept = [w for w in words if rng.random() >= p]
    if not kept:
        kept = [rng.choice(words)]
    return " ".join(kept)


def span_swap(sentence: str, rng: random.Random) -> str:
    words = sentence.split()
    if len(words) < 4:
        return sentence
    n = rng.randint(1, min(3, len(words) // 2))
    i = rng.randint(0, len(words) - 2 * n)
    j = rng.randint(i + n, len(words) - n)
    out = words[:i] + words[j : j + n] + words[i + n : j] + words[i : i + n] + words[j + n :]
    return " ".join(out)


def synonym(sentence: str, rng: random.Random, p: float = 0.5) -> str:
    def swap(m: re.Match) -> str:
        token = m.group(0)
        core = token.strip(".,!?;:'\"()")
        options = SYNONYMS.get(core.lower())
        if not options or rng.random() >= p:
            return token
        choice = rng.choice(options)
        if core[:1].isupper():
            choice = choice.capitalize()
        return token.replace(core, choice, 1)

    return _WORD.sub(swap, sentence)


_FUNCS = {Augment.WORD_DROPOUT: word_dropout, Augment.SPAN_SWAP: span_swap, Augment.SYNONYM: synonym}


def augment(sentences: Sequence[str], kinds: Sequence[Augment | str], *, copies: int = 1, seed: int = 0) -> list[str]:
    """Perturbed copies of ``sentences`` (one random ``kind`` per copy), new sentences only, in order."""
    kinds = parse_augment(kinds)
    if not kinds or copies < 1:
        return []
    rng = random.Random(seed)
    seen = set(sentences)
    out: list[str] = []
    for s in sentences:
        for _ in range(copies):
            new = _FUNCS[rng.choice(kinds)](s, rng).strip()
            if new and new not in seen:
                seen.add(new)
                out.append(new)
    return out
