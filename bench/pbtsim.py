"""PBT's decisions alone, on bench/pbt.py's toy in simulated time: what the core's own rule
(``manifest.search.exploit.decide``) reaches when the fleet is taken away.

Eight members of examples/pbt/train.py's SGD (the same arithmetic, the same noise per step)
step in simulated time, each step 1 +- ``jitter`` units; at every boundary a member records
its loss and checkpoint and is judged with ``decide`` as the worker judges it (against every
other member's latest boundary, its synced checkpoint's step); an exploit copies the donor's
checkpoint of its last boundary and costs ``--exploit-cost`` units (a real exploit: about 2 s
at 0.05 s a step, 40 units). Against the same members without PBT (baseline, same draws) and
the same decisions judged by Ray's rule (every member's latest value, whatever its step).
What the real runs of bench/pbt.py reach below these is lost to the system, not the rule.

Run from the repo root: `python bench/pbtsim.py [--seeds 8]`.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.timing import parse_args  # noqa: E402
from manifest.search.config import Direction, Range  # noqa: E402
from manifest.search.exploit import decide  # noqa: E402
from manifest.search.pbt import Kind, PbtConfig, Standing  # noqa: E402

DIMS, START = 100, 100.0  # examples/pbt/train.py's
SPACE = {"lr": Range(1e-3, 1.0, log=True)}


def sgd(w: list[float], lr: float, step: int) -> list[float]:
    noise = random.Random(step)  # train.py's noise at this step
    return [x - lr * (x + noise.gauss(0.0, 1.0)) for x in w]


def loss(w: list[float]) -> float:
    return 0.5 * sum(x * x for x in w) / DIMS


def run(seed: int, a, *, rule: str | None) -> tuple[float, int]:
    """The best final loss of one population (``rule``: "core", "ray", or None: no PBT) and
    its exploits."""
    draw = random.Random(seed)
    lr = [math.exp(draw.uniform(math.log(1e-3), 0.0)) for _ in range(a.population)]
    at = [{"step": 0, "w": [START] * DIMS, "t": 0.0, "ck": 0, "cw": None} for _ in lr]
    latest: dict[int, tuple[int, float]] = {}
    config = PbtConfig(population=a.population, interval=a.interval, quantile=a.quantile)
    exploits = 0
    while live := [n for n, m in enumerate(at) if m["step"] < a.last_step]:
        n = min(live, key=lambda i: at[i]["t"])
        m = at[n]
        m["step"] += 1
        m["w"] = sgd(m["w"], lr[n], m["step"])
        m["t"] += draw.uniform(1 - a.jitter, 1 + a.jitter)
        if rule is None or not config.is_boundary(m["step"], a.last_step):
            continue
        latest[n] = (m["step"], loss(m["w"]))
        m["ck"], m["cw"] = m["step"], list(m["w"])  # the boundary's sync
        others = [
            Standing(o, max(b, m["step"]) if rule == "ray" else b, v, at[o]["ck"], {"lr": lr[o]})
            for o, (b, v) in latest.items()
            if o != n
        ]
        me = Standing(n, m["step"], latest[n][1], m["step"], {"lr": lr[n]})
        d = decide(me, others, config, SPACE, direction=Direction.MINIMIZE, seed=seed)
        if d.kind is Kind.EXPLOIT:
            exploits += 1
            donor = at[d.donor]
            m["w"], m["step"], lr[n] = list(donor["cw"]), donor["ck"], d.new["lr"]
            m["t"] += a.exploit_cost
    return min(loss(m["w"]) for m in at), exploits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default, what in (
        ("--seeds", int, 8, "populations per rule"),
        ("--population", int, 8, "members"),
        ("--last-step", int, 80, "the step a member ends at"),
        ("--interval", int, 5, "steps between boundaries"),
        ("--quantile", float, 0.25, "the scheduler's quantile"),
        ("--jitter", float, 0.5, "a step takes 1 +- this units"),
        ("--exploit-cost", float, 40.0, "units an exploit costs its member"),
    ):
        ap.add_argument(flag, type=kind, default=default, help=what)
    a = parse_args(ap, seeds=1, last_step=20)
    got = {
        rule or "no PBT": [run(s, a, rule=rule) for s in range(a.seeds)]
        for rule in (None, "core", "ray")
    }
    base = statistics.median(v for v, _ in got["no PBT"])
    for name, runs in got.items():
        best = [v for v, _ in runs]
        print(
            f"{name:<7} median best {statistics.median(best):.4f} "
            f"({statistics.median(best) / base:.2f}x no PBT), exploits per run "
            f"{statistics.median(e for _, e in runs):g}: " + ", ".join(f"{v:.4f}" for v in best)
        )


if __name__ == "__main__":
    main()
