"""No usage reports to third parties on our users' behalf (stdlib only).

onnxruntime's Linux and macOS wheels (1DS telemetry, seen with 1.32.0) record a ``ProcessInfo`` event at
``import onnxruntime`` (a device id, the OS, the Python path, the network type) into an upload queue under
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/``, and session events after it; ``disable_telemetry_events()``
comes too late for the first. ``ORT_DISABLE_TELEMETRY=1`` set before the import turns all of it off (no device id
file, no queue, no upload): ``import espresso_export`` sets it unless the user set it (``0`` keeps theirs on).

OpenVINO's Python package and NNCF report usage to Google Analytics through ``openvino_telemetry``: an event at
``import openvino``, and a session of events for each ``nncf.compress_weights`` (seen with openvino 2026.4 and
nncf 3.4). They ask no one: with no consent file, consent is assumed, and they write ``~/intel/`` (a client id and
a usage count). ``export --format onnx,openvino`` and ``OnnxEncoder`` on an OpenVINO file would do both for the
user without a word. Both libraries treat a missing ``openvino_telemetry`` as "no telemetry" (their own
``except ImportError`` fallback), so before the first OpenVINO import we hide that module from this process,
unless the user opted in with OpenVINO's own tool (``opt_in_out --opt_in``: the consent file holds ``1``) or
their program imported it already (theirs to decide).
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
