"""The CPU's int8- and bf16-relevant instruction sets, read from ``/proc/cpuinfo`` (stdlib only).

int8 matrix products are computed differently on CPUs with VNNI (one
instruction, 32-bit accumulation) and on plain AVX2/AVX-512 (16-bit
intermediate sums that can saturate), so an int8 file's accuracy is only
known for the instruction set it was checked on.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# best first: the first flag present names the instruction set int8 kernels use
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "avx512f", "avx2")
# bf16 matrix products in hardware: AVX512-BF16 (AMD Zen 4, Intel Cooper Lake+), AMX (Intel Sapphire Rapids+),
# Arm's BF16 extension (``bf16`` in the Features line). Without one, bf16 products are converted in software, so
# distill's ``--amp auto`` stays fp32.
BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), else the CPU count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _first_field(cpuinfo: str | Path, keys: tuple[str, ...]) -> str | None:
    """The value of the first line of ``cpuinfo`` whose key is one of ``keys`` (None: no such line or no file)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags, or an empty set where ``/proc/cpuinfo`` is unavailable."""
    return set((_first_field(cpuinfo, ("flags", "Features")) or "").split())


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's name as the kernel reports it (``model name``), else what Python knows (may be empty).

    Recorded beside speed and int8 measurements: a speed-up belongs to a CPU, not only to its instruction set,
    and the flags alone do not tell two CPUs apart. x86 family and model numbers are added: a virtual machine
    often names only the vendor ("Intel(R) Xeon(R) Processor")."""
    name = _first_field(cpuinfo, ("model name", "Model", "Hardware")) or platform.processor()
    family, number = _first_field(cpuinfo, ("cpu family",)), _first_field(cpuinfo, ("model",))
    return f"{name} (family {family}, model {number})" if family and number else name


def int8_isa(cpuinfo: str | Path = "/proc/cpuinfo") -> dict:
    """``{"isa": best flag or machine name, "flags": {flag: present}, "machine": ..., "model": CPU name}``."""
    flags = cpu_flags(cpuinfo)
    present = {f: f in flags for f in INT8_FLAGS}
    best = next((f for f in INT8_FLAGS if present[f]), None)
    return {"isa": best or platform.machine() or "unknown", "flags": present, "machine": platform.machine(),
            "model": cpu_model(cpuinfo)}


def bf16_isa(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The first of :data:`BF16_FLAGS` this CPU has (bf16 products in hardware), or None."""
    flags = cpu_flags(cpuinfo)
    return next((f for f in BF16_FLAGS if f in flags), None)


# above this many cores kept busy by other processes on average while timing, a speed measurement is not trusted
# (verify's latency, the export's timing); an idle machine stays far below it
MAX_OTHER_CORES = 0.25


def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, CPU seconds of this process) now, from ``/proc/stat`` and
    ``os.times()``; None where ``/proc/stat`` is missing (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    own = os.times()
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def other_cores(before: tuple[float, float] | None, after: tuple[float, float] | None, wall: float) -> float | None:
    """CPU cores other processes kept busy on average between two :func:`cpu_seconds` readings ``wall`` seconds
    apart (this process's own time left out); None where ``/proc/stat`` is missing. An idle machine: ~0.002."""
    if before is None or after is None or wall <= 0:
        return None
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / wall)
