"""How fast each written ONNX file is, measured by the export itself, and which one to recommend.

Graph optimisation and int8 are not faster on every CPU and model, so the export times every file it wrote on
the STS probe sentences, interleaved (file after file, a few rounds, the best round kept: on a shared machine
the least disturbed one), at the batch sizes asked for, and recommends the file asked for unless another that
passed validation is faster in every round (:func:`recommend`), so the default does not flip with the noise.
Each file records its speed relative to its unoptimised sibling (``vs_unoptimized``) and, for int8/fp16, to
the fp32 graph (``vs_fp32``); a ratio under 1 is reported as slower, not hidden.

On a machine with 2+ cores the recommended file is also timed with its threads split into two streams
(``OnnxEncoder(..., streams=2)``) at the largest batch size, against one stream: ``timing.streams``. What
that gains depends on the model and the CPU, so it is measured here rather than advised blindly.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from espresso_export.exporting.export_folder import BASE_FILE

TIMING_SENTENCES = 128
TIMING_ROUNDS = 3
STREAMS = 2  # what ``timing.streams`` measures: the recommended file on this many streams


def _rates(encoders: dict, texts: list[str], batches: tuple[int, ...], rounds: int) -> dict[str, dict[int, list[float]]]:
    """Sentences per second of each encoder at each batch size, one list entry per interleaved round."""
    for enc in encoders.values():  # warm-up: first runs allocate and pick kernels (and compile fixed shapes)
        enc.encode(texts[:max(batches)], batch_size=max(batches))
        if 1 in batches:
            encode_as_served(enc.encode, texts, 1)
    rates: dict[str, dict[int, list[float]]] = {n: {b: [] for b in batches} for n in encoders}
    for _ in range(rounds):
        for name, enc in encoders.items():
            for b in batches:
                start = time.perf_counter()
                encode_as_served(enc.encode, texts, b)
                rates[name][b].append(len(texts) / (time.perf_counter() - start))
    return rates


def encode_as_served(encode, texts: list[str], batch: int) -> None:
    """``encode(texts, batch_size)`` (arguments by position) over ``texts``; batch 1 as one call per text in the
    given order, as queries arrive (one call with batch size 1 would sort them by length, and the shape change
    from call to call, which costs OpenVINO's dynamic model, would not show)."""
    if batch == 1:
        for text in texts:
            encode([text], 1)
    else:
        encode(texts, batch)


def choose_fixed_widths(dynamic, fixed, texts: list[str]) -> tuple[bool, float]:
    """One text at a time through an OpenVINO file: ``fixed`` (its encoder with the fixed-shape copies, runtime
    ``FIXED_WIDTHS``) against ``dynamic`` (the same file without them), interleaved. The copies are kept only
    when faster in every round (the rule of :func:`recommend`): padding costs compute, the shape change per call
    costs set-up, and which weighs more depends on the model and the CPU. Returns (kept, fixed / dynamic)."""
    rates = _rates({"dynamic": dynamic, "fixed": fixed}, texts, (1,), TIMING_ROUNDS)
    kept = recommend(rates, ["dynamic", "fixed"], "dynamic") == "fixed"
    return kept, round(max(rates["fixed"][1]) / max(rates["dynamic"][1]), 3)


def _unoptimized_onnx(f: dict, by_name: dict[str, dict]) -> str | None:
    """The unoptimised ONNX file of ``f``'s precision (other than ``f``): what an optimised file, or an OpenVINO
    file, is compared with."""
    return next((n for n, g in by_name.items() if n != f["file"] and n.endswith(".onnx")
                 and g["quantization"] == f["quantization"] and g["optimization"] == "none"), None)


def _ratios(best: dict[str, dict[int, float]], name: str, other: str | None) -> dict[str, float] | None:
    if other is None or other not in best:
        return None
    return {str(b): round(best[name][b] / best[other][b], 3) for b in best[name]}


def _x(ratio: float) -> str:
    """A ratio as ``1.13x``; three decimals where two would print a ratio below or above 1 as ``1.00x``."""
    text = f"{ratio:.2f}"
    return f"{ratio:.3f}x" if text == "1.00" and ratio != 1.0 else f"{text}x"


def _notes(name: str, against: str, ratios: dict[str, float] | None, what: str) -> list[str]:
    if not ratios:
        return []
    slow = {b: r for b, r in ratios.items() if r < 1.0}
    return [f"{name} is {what} {against} at batch {b} ({_x(r)})" for b, r in slow.items()]


def time_files(folder: Path, files: list[dict], texts: list[str], batches: tuple[int, ...],
               threads: int | None = None) -> dict:
    """Time ``files`` (export.json entries, updated in place with ``speed``); returns the ``timing`` record.

    What other processes used meanwhile is measured (``/proc/stat``, as verify does): above
    :data:`~espresso_export.core.cpu.MAX_OTHER_CORES` the record says ``"reliable": false`` with its reasons, the
    first note says so, and the recommendation stays the file asked for (a disturbed round must not pick it)."""
    from espresso_export.core.cpu import cpu_seconds, other_cores

    before, started = cpu_seconds(), time.perf_counter()
    timing = _time_files(folder, files, texts, batches, threads)
    busy = other_cores(before, cpu_seconds(), time.perf_counter() - started)
    reasons = _unreliable(busy, timing.get("streams"))
    timing.update(other_cores=None if busy is None else round(busy, 3), reliable=not reasons, reasons=reasons)
    if reasons:
        timing["notes"].insert(0, "timing NOT reliable (" + "; ".join(reasons) + "): the speeds and ratios measured may "
                               "be wrong; export again on an idle machine")
        passed = _recommendable(files)
        asked = static_default(passed)["file"] if passed else None
        if timing["recommended"] not in (None, asked):
            timing["notes"].insert(1, f"the recommendation stays {asked}, the file asked for: "
                                      f"{timing['recommended']} was faster only on this disturbed timing (its "
                                      "streams timing is dropped)")
            for f in files:
                f["recommended"] = f["file"] == asked
            timing["recommended"], timing["streams"] = asked, None
    return timing


def _unreliable(busy: float | None, streams: dict | None) -> list[str]:
    from espresso_export.core.cpu import MAX_OTHER_CORES, usable_cores

    reasons = []
    if busy is not None and busy > MAX_OTHER_CORES:
        reasons.append(f"other processes kept {busy:.2f} of {usable_cores()} cores busy while timing (above "
                       f"{MAX_OTHER_CORES:g})")
    if streams and streams["vs_one_stream"] > streams["streams"] * 1.1:  # N streams on the same threads: at most Nx
        reasons.append(f"{streams['streams']} streams timed at {streams['vs_one_stream']:.2f}x one stream, more than "
                       "their number: the one-stream rounds were disturbed")
    return reasons


def _time_files(folder: Path, files: list[dict], texts: list[str], batches: tuple[int, ...],
                threads: int | None) -> dict:
    from espresso_export.core.cpu import usable_cores
    from espresso_export.runtime import FIXED_WIDTHS, OnnxEncoder

    threads = threads or usable_cores()
    texts = list(dict.fromkeys(texts))[:TIMING_SENTENCES]
    encoders = {f["file"]: OnnxEncoder(folder, f["file"], threads=threads, fixed_widths=()) for f in files}
    batch1: dict[str, float] = {}  # OpenVINO file -> its fixed-shape copies' speed against the dynamic model
    for f in files:
        if f.get("runtime") == "openvino" and 1 in batches:
            fixed = OnnxEncoder(folder, f["file"], threads=threads, fixed_widths=FIXED_WIDTHS)
            kept, batch1[f["file"]] = choose_fixed_widths(encoders[f["file"]], fixed, texts)
            f["fixed_widths"] = list(FIXED_WIDTHS) if kept else []
            if kept:
                encoders[f["file"]] = fixed  # the file is timed as it will run
    rates = _rates(encoders, texts, batches, TIMING_ROUNDS)
    best = {n: {b: max(v) for b, v in r.items()} for n, r in rates.items()}
    by_name = {f["file"]: f for f in files}
    notes: list[str] = []
    for f in files:
        name = f["file"]
        speed = {"sentences_per_second": {str(b): round(v, 1) for b, v in best[name].items()},
                 "spread": {str(b): [round(min(v), 1), round(max(v), 1)] for b, v in rates[name].items()}}
        plain = _unoptimized_onnx(f, by_name)
        # an optimised file against no optimisation; an OpenVINO file against onnxruntime at its precision
        key = "vs_onnx" if f.get("runtime") == "openvino" else "vs_unoptimized" if f["optimization"] != "none" else None
        if key and (r := _ratios(best, name, plain)) is not None:
            speed[key] = r
            notes += _notes(name, plain, r, "slower than")
            if key == "vs_onnx" and all(v > 1.0 for v in r.values()):  # never the default (below): say it is faster
                notes.append(f"{name} is faster than {plain} at every batch size timed "
                              f"({', '.join(_x(v) for v in r.values())}): serve it where OpenVINO runs")
        if f["quantization"] != "none" and (r := _ratios(best, name, BASE_FILE)) is not None:
            speed["vs_fp32"] = r
            speed["faster_than_fp32"] = all(v > 1.0 for v in r.values())
            notes += _notes(name, BASE_FILE, r, "not faster than")
        if name in batch1:  # one text at a time: fixed-shape copies against the dynamic model
            speed["batch1_fixed_vs_dynamic"] = ratio = batch1[name]
            if f["fixed_widths"]:
                notes.append(f"{name} runs one text at a time on fixed-shape copies ({ratio:.2f}x the dynamic model)")
        f["speed"] = speed
    passed = _recommendable(files)
    recommended = recommend(rates, [f["file"] for f in passed], static_default(passed)["file"]) if passed else None
    for f in files:
        f["recommended"] = f["file"] == recommended
    streams = _streams(folder, encoders[recommended], recommended, texts, max(batches), threads) if recommended else None
    return {"batches": list(batches), "sentences": len(texts), "rounds": TIMING_ROUNDS, "kept": "best round",
            "threads": threads, "recommended": recommended, "notes": notes, "rule": RULE,
            "streams": streams}


def _recommendable(files: list[dict]) -> list[dict]:
    """The files that may become the default: passed validation, and ONNX (onnxruntime alone loads it): OpenVINO
    files are timed, not recommended."""
    return [f for f in files if f.get("validation", {}).get("passed", True) and f["file"].endswith(".onnx")]


def _streams(folder: Path, one, file: str, texts: list[str], batch: int, cores: int) -> dict | None:
    """``file`` on :data:`STREAMS` streams of ``cores`` threads against one stream (``one``, already timed),
    ``batch`` texts a call: None where there is one thread or batch 1 only (one text a call gains nothing)."""
    from espresso_export.runtime import OnnxEncoder

    if cores < STREAMS or batch < 2:
        return None
    many = OnnxEncoder(folder, file, threads=cores, streams=STREAMS, fixed_widths=())
    rates = _rates({"one": one, "streams": many}, texts, (batch,), TIMING_ROUNDS)
    return {"file": file, "streams": STREAMS, "threads": cores, "batch": batch,
            "sentences_per_second": round(max(rates["streams"][batch]), 1),
            "vs_one_stream": round(max(rates["streams"][batch]) / max(rates["one"][batch]), 3)}


RULE = ("the file asked for (int8 before fp32, optimised first) unless a file that passed validation is faster in "
        "every round at every batch size; then the fastest such file (geometric mean of the best rounds)")


def static_default(files: list[dict]) -> dict:
    """The file the export prefers without timing: int8 before fp32 before fp16, the optimised graph first."""
    return min(files, key=lambda f: ({"int8": 0, "none": 1}.get(f["quantization"], 2), f["optimization"] == "none"))


def recommend(rates: dict[str, dict[int, list[float]]], names: list[str], preferred: str) -> str:
    """``preferred``, unless another of ``names`` is clearly faster: its slowest round beats ``preferred``'s
    fastest round at every batch size. Then the fastest of those (geometric mean of the best rounds).

    Near-equal files would otherwise swap places from one run to the next on a shared machine, and the
    default file would flip with the noise."""
    best = {n: {b: max(v) for b, v in rates[n].items()} for n in names}
    clear = [n for n in names if n != preferred
             and all(min(rates[n][b]) > max(rates[preferred][b]) for b in rates[preferred])]
    return max(clear, key=lambda n: _score(best, n)) if clear else preferred


def _score(best: dict[str, dict[int, float]], name: str) -> float:
    base = best.get(BASE_FILE, best[name])
    return math.exp(sum(math.log(best[name][b] / base[b]) for b in best[name]) / len(best[name]))
