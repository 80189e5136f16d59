"""The package's one exception hierarchy: every error a user can cause or hit carries the exit code the CLI
returns for it (0 success, 1 runtime failure, 2 usage or validation, 3 failed quality gate, 130 Ctrl-C, 143
SIGTERM), so the command line maps exceptions to codes in one place (docs/errors.md lists them).
"""

from __future__ import annotations

import errno
import os


class EspressoError(Exception):
    """Base class: a one-line, user-facing message plus an exit code."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class ValidationError(EspressoError):
    """Bad user input: an option, a path, a file's content. Exit code 2."""

    exit_code = 2


class NotFoundError(ValidationError):
    """A local path or a Hub id that does not exist."""


class UnsupportedModelError(ValidationError):
    """A checkpoint whose architecture or weight format we do not handle."""


class OutputExistsError(ValidationError):
    """The output folder exists and ``--overwrite`` was not given."""


class CorruptCheckpointError(ValidationError):
    """Weights that cannot be read or contain NaN/Inf."""


class RuntimeFailure(EspressoError):
    """Something failed while running (I/O, disk full, network). Exit code 1."""

    exit_code = 1


class OfflineError(RuntimeFailure):
    """The Hub could not be reached."""


class GateFailedError(EspressoError):
    """A quality gate of ``verify`` did not hold. Exit code 3."""

    exit_code = 3


# errno values that mean "the file system would not take the write": a runtime failure, not a bad model
_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}
_HINTS = {errno.ENOSPC: " (disk full)", errno.EFBIG: " (a file-size limit: ulimit -f, or the file system's maximum)",
          errno.EDQUOT: " (disk quota exceeded)"}


def os_error_in(exc: BaseException) -> OSError | None:
    """The write failure (an ``OSError`` with a file-system errno) that caused ``exc``, if any.

    Libraries wrap it (torch's exporters, onnx, safetensors), so the ``__cause__``/``__context__`` chain is
    followed."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def write_failure(target, e: OSError) -> RuntimeFailure:
    """``cannot write TARGET: no space left on device (disk full)``: the errno's own text, exit code 1."""
    text = (e.strerror or os.strerror(e.errno) if e.errno else str(e)) or e.__class__.__name__
    return RuntimeFailure(f"cannot write {target}: {text[0].lower() + text[1:]}{_HINTS.get(e.errno, '')}")


EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_GATE = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it (core/signals.py)
