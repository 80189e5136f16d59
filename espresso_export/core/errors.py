"""The package's one exception hierarchy.

Every error a user can cause or hit carries the exit code the CLI returns for
it, so the command line maps exceptions to codes in one place:

=====  =====================================================
code   meaning
=====  =====================================================
0      success
1      runtime failure (I/O, model failed to run, disk full)
2      usage or validation error (bad option, bad input)
3      a quality gate failed (``verify``)
130    interrupted (Ctrl-C)
143    terminated (SIGTERM: ``docker stop``, Kubernetes, SLURM)
=====  =====================================================
"""

from __future__ import annotations


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


EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_GATE = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it (core/signals.py)
