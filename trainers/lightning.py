"""PyTorch Lightning glue for a job (docs/stacks.md): a callback that prints each logged
metric as a ``FLEET_METRIC`` line, and where to resume from in ``FLEET_CHECKPOINT_DIR``.

Imports Lightning when imported itself, so only a job that uses Lightning pays for it;
``trainers`` never imports this module. Works with ``lightning`` or ``pytorch_lightning``,
whichever the job has (the callback must come from the package the job's Trainer does).

    from trainers.lightning import FleetMetrics, checkpoint_callback, resume_path

    trainer = pl.Trainer(callbacks=[FleetMetrics(), checkpoint_callback()], ...)
    trainer.fit(model, data, ckpt_path=resume_path())
"""

from __future__ import annotations

import os
from pathlib import Path

from trainers import protocol
from trainers.report import report

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package
    import pytorch_lightning as pl

LAST = "last.ckpt"


def _scalar(value) -> float | None:
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):  # a tensor of many values, a string
        return None
    return number  # nan too: the worker keeps it as the text "nan"


class FleetMetrics(pl.Callback):
    """Print the metrics a LightningModule logged (``self.log``) once per epoch, train and
    validation together, as one line with ``epoch`` and ``step``: the epoch's curve point in
    ``fleet results``, and what a search's pruner sees. Rank 0 only, as Lightning logs."""

    def __init__(self, every_n_steps: int = 0):
        super().__init__()
        self.every_n_steps = every_n_steps  # also a line every N training steps (0: none)

    def _line(self, trainer, **extra) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        values = {k: _scalar(v) for k, v in trainer.callback_metrics.items()}
        values = {k: v for k, v in values.items() if v is not None}
        if values:
            report({**extra, "step": trainer.global_step, **values})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self._line(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # after validation in Lightning 2: the epoch's val_* metrics are in callback_metrics
        self._line(trainer, epoch=trainer.current_epoch)


def checkpoint_dir() -> Path | None:
    """The job's ``FLEET_CHECKPOINT_DIR`` (set when its manifest declares ``checkpoint``)."""
    d = os.environ.get(protocol.ENV_CHECKPOINT_DIR)
    return Path(d) if d else None


def checkpoint_callback(**kwargs) -> pl.callbacks.ModelCheckpoint:
    """A ``ModelCheckpoint`` into ``FLEET_CHECKPOINT_DIR`` keeping ``last.ckpt`` every epoch,
    which fleet syncs to the store and restores on the host that resumes the job; outside
    fleet, into ``./checkpoints``. ``kwargs`` go to ``ModelCheckpoint``."""
    where = checkpoint_dir() or Path("checkpoints")
    kwargs.setdefault("save_last", True)
    kwargs.setdefault("every_n_epochs", 1)
    return pl.callbacks.ModelCheckpoint(dirpath=str(where), **kwargs)


def resume_path() -> str | None:
    """The checkpoint to resume from for ``Trainer.fit(ckpt_path=...)``: ``last.ckpt`` in
    ``FLEET_CHECKPOINT_DIR``, else the newest ``*.ckpt`` there, else None (a first run)."""
    d = checkpoint_dir()
    if d is None or not d.is_dir():
        return None
    if (d / LAST).is_file():
        return str(d / LAST)
    found = sorted(d.glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    return str(found[-1]) if found else None
