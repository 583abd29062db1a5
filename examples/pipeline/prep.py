"""Step 1 of examples/pipeline: make the data once, for every later step.

Two noisy interleaved half-moons (2,000 points), split 80/20 into out/train.csv and
out/valid.csv (columns x1, x2, label), plus out/features.json saying how they were made. The
steps after it read these from $FLEET_INPUTS/prep/ (docs/pipelines.md)."""

import json
import os
from pathlib import Path

import numpy as np

POINTS, NOISE, VALID_SHARE = 2000, 0.25, 0.2


def moons(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    t = rng.uniform(0, np.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(t), 1 - np.cos(t))
    y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    points = np.stack([x, y], axis=1) + rng.normal(0, NOISE, (n, 2))
    return points, upper.astype(int)


def write(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    rows = np.column_stack([x, y])
    np.savetxt(path, rows, delimiter=",", header="x1,x2,label", comments="", fmt="%.6f")


def main() -> None:
    out = Path(os.environ.get("FLEET_OUTPUT_DIR", "out"))
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(int(os.environ.get("FLEET_SEED", "0")))
    x, y = moons(rng, POINTS)
    cut = int(POINTS * (1 - VALID_SHARE))
    write(out / "train.csv", x[:cut], y[:cut])
    write(out / "valid.csv", x[cut:], y[cut:])
    (out / "features.json").write_text(json.dumps({"points": POINTS, "noise": NOISE}))
    print(f"FLEET_METRIC {json.dumps({'train_rows': cut, 'valid_rows': POINTS - cut})}")


if __name__ == "__main__":
    main()
