"""Hugging Face ``transformers`` glue for a job (docs/stacks.md): a ``TrainerCallback`` that
prints each log the Trainer makes as a ``FLEET_METRIC`` line, and where to resume from.

Imports ``transformers`` when imported itself; ``trainers`` never imports this module.

    from trainers.hf import FleetMetrics, output_dir, resume_path

    args = TrainingArguments(output_dir=output_dir(), save_strategy="steps", ...)
    trainer = Trainer(model, args, train_dataset=data, callbacks=[FleetMetrics()])
    trainer.train(resume_from_checkpoint=resume_path())
"""

from __future__ import annotations

import os
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from trainers import protocol
from trainers.report import report


class FleetMetrics(TrainerCallback):
    """Print every log of the Trainer (``logging_steps``; evaluation too) as one line with
    ``step`` (the global step) and ``epoch``: numbers only, on the main process only."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        values = {
            k: v for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if values:
            report({"step": state.global_step, **values})


def output_dir() -> str:
    """Where the Trainer writes its ``checkpoint-N`` folders: ``FLEET_CHECKPOINT_DIR``, which
    fleet syncs and restores, when the manifest declares ``checkpoint``; else ``./hf-out``."""
    return os.environ.get(protocol.ENV_CHECKPOINT_DIR) or "hf-out"


def resume_path() -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir()`` for ``train(resume_from_checkpoint=)``,
    or None (a first run)."""
    d = Path(output_dir())
    return get_last_checkpoint(str(d)) if d.is_dir() else None
