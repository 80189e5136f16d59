"""The folders of every training command: the run folder's rules (one run at a time, resume or start over) and
the trained model folder written at the end."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from espresso_export.core.errors import ValidationError
from espresso_export.core.tempfiles import clean_stale
from espresso_export.core.files import atomic_output
from espresso_export.training import distributed
from espresso_export.training.resume import read_checkpoint_meta
from espresso_export.training.run_files import check_foreign, held, remove_run_files, stopped_early

if TYPE_CHECKING:
    from espresso_export.training.loop import Trainer


def check_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """The run-folder rule of every training command: resume needs a checkpoint (or a run stopped before its
    first one, :func:`~.run_files.mark_stopped_early`); a fresh start refuses to clobber an unfinished run unless
    ``overwrite``."""
    meta = read_checkpoint_meta(run_dir)
    if resume and meta is None and not stopped_early(run_dir):
        raise ValidationError(f"nothing to resume: no checkpoint in {run_dir} (was the run started with this -o?)")
    if not resume and meta is not None:
        if not overwrite:
            raise ValidationError(f"a checkpoint of an unfinished run (step {meta.get('step')}) is in {run_dir}: "
                                  "pass --resume to continue it, or --overwrite to start over (Python: resume=True, overwrite=True)")
        remove_run_files(run_dir)


@contextlib.contextmanager
def prepare_run(output, run_dir, *, resume: bool, overwrite: bool, inputs=()) -> Iterator[Path]:
    """Check the output folder against ``inputs`` (the models and files the run reads), lock the run folder for
    the ``with`` block (:mod:`.run_lock`) and apply :func:`check_run_dir`, before any model is loaded. Rank 0
    does it; its verdict reaches every rank.

    Yields the run folder (default: ``OUT.run`` beside the output)."""
    from espresso_export.core.files import check_output, is_within

    dist = distributed.current()
    if output is not None:
        dist.on_main(lambda: check_output(output, overwrite=overwrite, inputs=inputs) and None,
                     what="checking the output folder")
    if run_dir is None:
        if output is None:
            raise ValidationError("give an output folder or a run folder for the training checkpoints")
        run_dir = Path(str(Path(output).expanduser().resolve()) + ".run")
    run_dir = Path(run_dir).expanduser()
    if output is not None and is_within(run_dir.resolve(), Path(output).expanduser().resolve()):
        raise ValidationError(f"--run-dir {run_dir} is the output folder or inside it; give a folder beside it")
    dist.on_main(lambda: check_foreign(run_dir), what="checking the run folder")
    with contextlib.ExitStack() as stack:
        dist.on_main(lambda: stack.enter_context(held(run_dir)) and None, what="locking the run folder")
        dist.on_main(lambda: check_run_dir(run_dir, resume=resume, overwrite=overwrite), what="checking the run folder")
        dist.on_main(lambda: clean_stale(run_dir) and None, what="removing temp files of killed runs")
        yield run_dir


def write_trained(ckpt, output, prov: dict, *, overwrite: bool, trainer: Trainer, keep_checkpoints: bool):
    """Chain ``prov`` onto the checkpoint's lineage and write the trained model folder atomically.

    Returns the resolved output folder (``None`` when ``output`` is ``None``: in-memory runs)."""
    from espresso_export.model.save import save_checkpoint

    if ckpt.provenance:
        prov["parent"] = ckpt.provenance
    ckpt.provenance = prov
    if output is None or not distributed.current().main:  # in memory, or not the writing rank
        return None
    with atomic_output(output, overwrite=overwrite, inputs=[ckpt.path]) as tmp:
        save_checkpoint(ckpt, tmp, post=ckpt.post, provenance=prov)
    if not keep_checkpoints:
        trainer.cleanup()
    return Path(output).expanduser().resolve()
