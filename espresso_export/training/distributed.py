"""Data-parallel runs on ``torch.distributed``, as ``torchrun`` launches them::

    torchrun --nproc_per_node 4 -m espresso_export distill ...

:func:`setup` joins the process group ``torchrun`` describes in the environment; the trainer wraps the task's
modules in ``DistributedDataParallel`` and this module supplies the few collectives around it. Without
``torchrun`` :func:`current` is the single-process context and every helper is a no-op.

NCCL for ``--device cuda``, gloo otherwise; control messages always go over a CPU gloo group. Every collective
gives up after ``ESPRESSO_DIST_TIMEOUT`` seconds (default 600), so a rank that dies or hangs makes the others fail
with :class:`PeerFailure` instead of waiting forever. Only rank 0 writes, except the teacher cache, which every
rank fills in shards: the cache and the run folder must be on a filesystem every rank sees (checked).
"""

from __future__ import annotations

import atexit
import json
import os
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export.core.errors import EspressoError, RuntimeFailure, ValidationError

ENV_TIMEOUT = "ESPRESSO_DIST_TIMEOUT"
DEFAULT_TIMEOUT = 600.0  # seconds; NCCL's own default, long enough for rank 0's evaluation and checkpoint writes


class PeerFailure(RuntimeFailure):
    """A collective with the other ranks failed or timed out (another rank died, hangs or lost the network)."""


def timeout_seconds() -> float:
    raw = os.environ.get(ENV_TIMEOUT)
    if raw is None or raw.strip() == "":
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError(f"{ENV_TIMEOUT} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValidationError(f"{ENV_TIMEOUT} must be positive, got {raw!r}")
    return value


_COMM_MARKERS = ("gloo", "nccl", "timed out", "timeout", "connection", "peer", "socket", "broken pipe", "store")


def _is_communication_error(e: BaseException) -> bool:
    import torch.distributed as td

    dist_error = getattr(td, "DistError", None)
    return (dist_error is not None and isinstance(e, dist_error)) or any(m in str(e).lower() for m in _COMM_MARKERS)


def launched_world_size() -> int:
    """``WORLD_SIZE`` as set by ``torchrun`` (1 when not launched by it)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


@dataclass
class Dist:
    """This process's place in the run. ``Dist()`` is the single-process run."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    _ctrl: Any = field(default=None, repr=False)  # the CPU gloo group for control messages

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    # -- error translation ---------------------------------------------------------------------------
    @contextmanager
    def guard(self, what: str):
        """Turn a failed collective inside the block into a one-line :class:`PeerFailure`."""
        if not self.enabled:
            yield
            return
        import torch

        try:
            yield
        except EspressoError:
            raise
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as e:  # DistBackendError, gloo "Connection closed by peer", timeouts
            if not _is_communication_error(e):  # a genuine failure of this rank's own work: as it is
                raise
            first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
            global _BROKEN
            _BROKEN = True
            raise PeerFailure(
                f"rank {self.rank} of {self.world}: {what} with the other ranks failed: another rank died, hangs "
                f"or is unreachable (collective timeout {self.timeout:g} s, set {ENV_TIMEOUT} to change it). "
                f"The last checkpoint can be continued with --resume, with any number of processes. "
                f"(cause: {first[:200].replace('[', '(').replace(']', ')')})"
            ) from e

    # -- batches -------------------------------------------------------------------------------------
    def shard_bounds(self, n: int, align: int = 1) -> list[tuple[int, int]]:
        """Contiguous, deterministic ``[start, stop)`` of ``n`` items per rank (the first ``n % world`` get one more).

        With ``align`` the shares are whole blocks of ``align`` items (the last block may be shorter)."""
        q, r = divmod(-(-n // align), self.world)
        bounds, start = [], 0
        for i in range(self.world):
            stop = start + q + (1 if i < r else 0)
            bounds.append((min(n, start * align), min(n, stop * align)))
            start = stop
        return bounds

    def shard(self, items: Sequence) -> list:
        """This rank's contiguous slice of ``items`` (a global batch, a corpus)."""
        start, stop = self.shard_bounds(len(items))[self.rank]
        return list(items[start:stop])

    # -- control collectives (CPU gloo) --------------------------------------------------------------
    def barrier(self, what: str = "waiting for the other ranks") -> None:
        if not self.enabled:
            return
        import torch.distributed as td

        with self.guard(what):
            td.barrier(group=self._ctrl)

    def broadcast_json(self, value: Any = None, *, what: str = "a broadcast from rank 0") -> Any:
        """Rank 0's JSON-able ``value`` on every rank (JSON on the wire, never pickle)."""
        if not self.enabled:
            return value
        import torch
        import torch.distributed as td

        with self.guard(what):  # host: control messages travel over the CPU (gloo) group
            data = json.dumps(value).encode() if self.main else b""
            size = torch.tensor([len(data)], dtype=torch.int64)
            td.broadcast(size, 0, group=self._ctrl)
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.main else torch.empty(int(size), dtype=torch.uint8)
            td.broadcast(buf, 0, group=self._ctrl)
        return value if self.main else json.loads(bytes(buf.numpy()).decode())

    def broadcast_arrays(self, arrays: dict[str, np.ndarray] | None, *, what: str = "a broadcast from rank 0") -> dict:
        """Rank 0's numpy arrays on every rank (shapes and dtypes travel first)."""
        if not self.enabled:
            return arrays
        import torch
        import torch.distributed as td

        spec = self.broadcast_json({k: [list(v.shape), str(v.dtype)] for k, v in arrays.items()} if self.main else None,
                                   what=what)
        out = {}
        with self.guard(what):  # host: control messages travel over the CPU (gloo) group
            for key, (shape, dtype) in spec.items():
                t = torch.from_numpy(np.ascontiguousarray(arrays[key])) if self.main else \
                    torch.from_numpy(np.empty(shape, dtype=np.dtype(dtype)))
                td.broadcast(t, 0, group=self._ctrl)
                out[key] = t.numpy()
        return out

    def all_gather_json(self, value: Any, *, what: str = "an exchange between ranks") -> list:
        """Every rank's JSON-able ``value``, in rank order."""
        if not self.enabled:
            return [value]
        import torch
        import torch.distributed as td

        data = json.dumps(value).encode()
        with self.guard(what):  # host: control messages travel over the CPU (gloo) group
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
            td.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=self._ctrl)
            longest = max(int(t) for t in sizes)
            mine = torch.zeros(longest, dtype=torch.uint8)
            mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else mine[:0]
            bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
            td.all_gather(bufs, mine, group=self._ctrl)
        return [json.loads(bytes(b[: int(n)].numpy()).decode()) for b, n in zip(bufs, sizes)]

    def sum_floats(self, values: Sequence[float], *, what: str = "the loss reduction") -> list[float]:
        """Element-wise sum of ``values`` over the ranks (float64, on the CPU group)."""
        if not self.enabled:
            return list(values)
        import torch
        import torch.distributed as td

        # host: control messages travel over the CPU (gloo) group
        t = torch.tensor(list(values), dtype=torch.float64)
        with self.guard(what):
            td.all_reduce(t, group=self._ctrl)
        return t.tolist()

    def on_main(self, fn: Callable[[], Any], *, what: str) -> Any:
        """Run ``fn`` on rank 0 only; its result (JSON-able) or its :class:`EspressoError` reaches every rank."""
        if not self.enabled:
            return fn()
        outcome: dict = {}
        if self.main:
            try:
                outcome = {"value": fn()}
            except EspressoError as e:
                outcome = {"error": type(e).__name__, "message": e.message, "code": e.exit_code}
                self.broadcast_json(outcome, what=what)
                raise
        outcome = self.broadcast_json(outcome, what=what)
        if "error" in outcome:
            raise EspressoError(outcome["message"], exit_code=outcome["code"])
        return outcome.get("value")

    def check_shared(self, folder: Path, *, purpose: str) -> None:
        """Refuse (on every rank) when a rank cannot see files rank 0 writes into ``folder``."""
        if not self.enabled:
            return
        marker = self.broadcast_json(f".shared-check-{uuid.uuid4().hex[:12]}" if self.main else None, what=purpose)
        path = Path(folder) / marker
        if self.main:
            path.write_text("rank 0\n", encoding="utf-8")
        self.barrier(purpose)
        seen = self.all_gather_json(path.is_file(), what=purpose)
        self.barrier(purpose)
        if self.main:
            path.unlink(missing_ok=True)
        blind = [r for r, ok in enumerate(seen) if not ok]
        if blind:
            raise ValidationError(f"{purpose}: rank(s) {blind} cannot see {folder} as rank 0 writes it; put it on a "
                                  "filesystem every node shares (e.g. --cache-dir / --run-dir on a network drive)")

    # -- data-parallel pieces ------------------------------------------------------------------------
    def gather_rows(self, x, sizes: Sequence[int], *, what: str = "gathering the batch's embeddings") -> list:
        """Every rank's ``x`` (rows ``sizes[r]``, same trailing shape) in rank order; this rank's entry is ``x``
        itself (it keeps its gradient), the others are constants."""
        if not self.enabled:
            return [x]
        import torch
        import torch.distributed as td

        rows = max(sizes)
        pad = x.detach().float()
        if pad.shape[0] < rows:
            pad = torch.cat([pad, pad.new_zeros((rows - pad.shape[0], *pad.shape[1:]))])
        bufs = [torch.empty_like(pad) for _ in range(self.world)]
        with self.guard(what):
            td.all_gather(bufs, pad.contiguous())
        return [x if r == self.rank else bufs[r][: sizes[r]].to(x.dtype) for r in range(self.world)]

    def wrap(self, modules: dict[str, Any], forward: Callable, device) -> Any:
        """A ``DistributedDataParallel`` module over ``modules`` whose ``forward(*args)`` is ``forward(*args)``."""
        import torch
        from torch.nn.parallel import DistributedDataParallel

        class Modules(torch.nn.Module):
            """The task's modules under one parent, so DDP sees every trainable parameter; forward is the loss."""

            def __init__(self):
                super().__init__()
                self.parts = torch.nn.ModuleDict(modules)

            def forward(self, *args):
                return forward(*args)

        holder = Modules()
        kwargs = {}
        if device.type == "cuda":
            kwargs = {"device_ids": [device.index if device.index is not None else torch.cuda.current_device()]}
        # buffers (position ids, ...) are constants: synced once at construction, never per step
        kwargs["forward_sync_buffers" if "forward_sync_buffers" in _ddp_params() else "broadcast_buffers"] = False
        with self.guard("setting up DistributedDataParallel"):
            return DistributedDataParallel(holder, find_unused_parameters=True, **kwargs)


def _ddp_params() -> frozenset[str]:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    return frozenset(inspect.signature(DistributedDataParallel.__init__).parameters)


_CURRENT = Dist()
_BROKEN = False  # a collective failed: leave the group to die with the process (destroying it may block)


def _teardown() -> None:
    import gc

    import torch.distributed as td

    gc.collect()  # objects in reference cycles that hold gloo work go now, while the interpreter is whole
    if not _BROKEN and td.is_initialized():
        td.destroy_process_group()


def current() -> Dist:
    """This process's context (single-process until :func:`setup` joined a launched group)."""
    return _CURRENT


def setup(device: str = "cpu") -> Dist:
    """Join the process group ``torchrun`` describes (once per process); a no-op for one process.

    ``device`` picks the backend: NCCL for ``cuda`` (and pins rank's GPU ``LOCAL_RANK``), gloo otherwise.
    """
    global _CURRENT
    if _CURRENT.enabled or launched_world_size() <= 1:
        return _CURRENT
    import torch
    import torch.distributed as td

    timeout = timeout_seconds()
    rank, world = int(os.environ["RANK"]), launched_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = (device or "cpu").lower() == "cuda"
    if (device or "cpu").lower() == "mps":
        raise ValidationError("several processes need --device cpu (gloo) or cuda (NCCL); Apple MPS trains in one process")
    if cuda:
        if not torch.cuda.is_available():
            raise ValidationError("--device cuda: no CUDA device is available on this machine")
        if local_rank >= torch.cuda.device_count():
            raise ValidationError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) on this node: "
                                  "use --nproc_per_node <= the number of GPUs")
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    if not td.is_available():
        raise ValidationError("this torch build has no torch.distributed; run with one process")
    try:
        if not td.is_initialized():
            td.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
        ctrl = td.new_group(backend="gloo", timeout=timedelta(seconds=timeout)) if backend != "gloo" else None
    except (RuntimeError, ValueError) as e:
        raise PeerFailure(f"rank {rank} of {world}: could not join the process group at "
                          f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} within {timeout:g} s "
                          f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from e
    _CURRENT = Dist(rank=rank, world=world, local_rank=local_rank, backend=backend, timeout=timeout, _ctrl=ctrl)
    atexit.register(_teardown)
    return _CURRENT


def progress_label(label: str | None) -> str | None:
    """``label`` on rank 0, None (no bar) on the other ranks."""
    return label if current().main else None
