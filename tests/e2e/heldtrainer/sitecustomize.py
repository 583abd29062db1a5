"""Holds a built-in trainer (``python -m trainers.run``) at an epoch until its test opens a gate.

A test that must kill a built-in ``mlp`` run mid-training cannot hold it on a length: the
run's progress reaches its record a tick late, and a busy machine can finish the run first.
The trainer has no hold of its own, and a user should not be able to trip one by accident;
so this folder is put on ``PYTHONPATH`` only by ``tests/harness/trainers.py``'s
``held_trainer_env``, for the one worker whose run is to be held. Python imports this module
at start-up in every process of that worker; it acts only in a job's process
(``FLEET_JOB_SPEC`` set) given ``HOLD_AT_ENV`` and ``HOLD_GATE_ENV``.

Once the process has printed its metric line for epoch ``HOLD_AT_ENV`` (so its record shows
that epoch, and the state of the epoch before it is saved in ``FLEET_CHECKPOINT_DIR``), it
stays there until the file ``HOLD_GATE_ENV`` exists (``tests/e2e/gate.py``). A resumed run
that starts past that epoch never holds.
"""

import os
import sys

HOLD_AT_ENV = "FLEET_TEST_HOLD_AT"
HOLD_GATE_ENV = "FLEET_TEST_HOLD_GATE"


class HeldOutput:
    """``sys.stdout`` that holds on the flush after the held epoch's metric line."""

    def __init__(self, out, epoch: int, gate: str):
        self._out, self._epoch, self._gate, self._due = out, epoch, gate, False

    def write(self, text: str) -> int:
        # print(line, flush=True) writes the line, then its newline, then flushes: hold on the
        # flush, once the whole line is out for the worker to read
        if "FLEET_METRIC" in text:
            from trainers.protocol import parse_metric_line

            report = parse_metric_line(text.strip())
            self._due = self._due or (report or {}).get("epoch") == self._epoch
        return self._out.write(text)

    def flush(self) -> None:
        self._out.flush()
        if self._due:
            self._due = False
            # gate.py sits beside this folder, which alone is on the path
            sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            from gate import held

            held(self._gate)

    def __getattr__(self, name):
        return getattr(self._out, name)


if os.environ.get("FLEET_JOB_SPEC") and os.environ.get(HOLD_AT_ENV) and sys.stdout is not None:
    sys.stdout = HeldOutput(sys.stdout, int(os.environ[HOLD_AT_ENV]), os.environ[HOLD_GATE_ENV])
