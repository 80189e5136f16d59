"""No usage reports to third parties on our users' behalf (stdlib only).

onnxruntime records telemetry events from ``import onnxruntime`` on: ``import espresso_export`` sets
``ORT_DISABLE_TELEMETRY=1`` first unless the user set it. OpenVINO and NNCF report usage through
``openvino_telemetry`` with consent assumed; both treat a missing ``openvino_telemetry`` as "no telemetry", so
before the first OpenVINO import it is hidden from this process, unless the user opted in with OpenVINO's own
tool or their program imported it already.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ORT_SWITCH = "ORT_DISABLE_TELEMETRY"
MODULE = "openvino_telemetry"
TELEMETRY_MODULES = ("openvino", "nncf")  # the packages that import it: every import of ours goes through
# core.extras.require, which calls no_openvino_telemetry first


def consent_file() -> Path | None:
    """Where ``openvino_telemetry`` keeps the user's answer (its ``OptInChecker.consent_file``)."""
    system = platform.system()
    if system == "Windows":
        base = os.environ.get("LOCALAPPDATA")
        return Path(base) / "Intel Corporation" / "openvino_telemetry" if base else None
    if system in ("Linux", "Darwin"):
        return Path.home() / "intel" / "openvino_telemetry"
    return None


def opted_in() -> bool:
    path = consent_file()
    try:
        return path is not None and path.read_text(encoding="utf-8").strip() == "1"
    except (OSError, UnicodeDecodeError):
        return False


def no_openvino_telemetry() -> None:
    """Call before importing openvino or nncf: their usage reports stay off unless the user opted in."""
    if MODULE in sys.modules or opted_in():
        return
    sys.modules[MODULE] = None  # "import openvino_telemetry" now raises ImportError: their no-telemetry path


def no_onnxruntime_telemetry() -> None:
    """Called by ``import espresso_export``: before onnxruntime is imported, unless the user's program did first."""
    os.environ.setdefault(ORT_SWITCH, "1")
