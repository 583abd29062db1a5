"""A checkpointing command job for the preemption tests: STEPS steps of STEP_S seconds, each
folding its number into a sha256 chain saved to FLEET_CHECKPOINT_DIR, so a run resumed from
its checkpoint ends with the same digest as one that was never interrupted. Reports its
starts and its result to COUNT_DIR/<name>.json.

Usage: ckptjob.py STEPS STEP_S [HOLD_AT GATE]: given HOLD_AT and GATE, a run that reaches step
HOLD_AT stays there (checkpoint written) until the file GATE exists (``gate.py``), so a test
preempts or kills it while it surely runs, however busy the machine."""

import hashlib
import json
import os
import pathlib
import sys
import time


def chain(steps: int, digest: str = "", start: int = 0) -> str:
    for step in range(start, steps):
        digest = hashlib.sha256(f"{digest}:{step}".encode()).hexdigest()
    return digest


def main(steps: int, step_s: float, hold_at: int = -1, gate: str = "") -> None:
    # here, not at the top: tests import chain() as tests.e2e.ckptjob, where gate is not a
    # top-level module; the script runs with its own folder on its path
    from gate import held

    report_path = pathlib.Path(os.environ["COUNT_DIR"]) / f"{os.environ['FLEET_JOB_NAME']}.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {"starts": []}
    ckpt_dir = os.environ.get("FLEET_CHECKPOINT_DIR")
    state = {"step": 0, "digest": ""}
    if ckpt_dir and (pathlib.Path(ckpt_dir) / "state.json").exists():
        state = json.loads((pathlib.Path(ckpt_dir) / "state.json").read_text())
    report["starts"].append({"at": time.time(), "from_step": state["step"]})
    report_path.write_text(json.dumps(report))
    while state["step"] < steps:
        time.sleep(step_s)
        state = {
            "step": state["step"] + 1,
            "digest": chain(state["step"] + 1, state["digest"], state["step"]),
        }
        if ckpt_dir:  # written whole, then renamed: a sync never sees half a state
            tmp = pathlib.Path(ckpt_dir) / "state.tmp"
            tmp.write_text(json.dumps(state))
            tmp.replace(pathlib.Path(ckpt_dir) / "state.json")
        print(f"step {state['step']}", flush=True)
        if state["step"] == hold_at:
            held(gate)
    report["digest"], report["end"] = state["digest"], time.time()
    report_path.write_text(json.dumps(report))


if __name__ == "__main__":
    hold = (int(sys.argv[3]), sys.argv[4]) if len(sys.argv) > 3 else ()
    main(int(sys.argv[1]), float(sys.argv[2]), *hold)
