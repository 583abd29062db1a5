"""Steps 2 and 3 of examples/pipeline: logistic regression on polynomial features, in numpy.

Reads prep's files from $FLEET_INPUTS/prep/ and its values from FLEET_HYPER (`lr`, `l2`,
`epochs`: a trial's come from its search; `final`'s from the search's best trial, under its
own `epochs`). Prints one FLEET_METRIC line per epoch with `valid_loss`, the search's metric.
With --full (the last step) it trains on train and valid together and saves the weights in
out/model.npz, with the values it used in out/params.json."""

import json
import os
import sys
from pathlib import Path

import numpy as np


def find(name: str) -> Path:
    """prep's file ``name`` wherever its bundle put it under $FLEET_INPUTS/prep/."""
    root = Path(os.environ.get("FLEET_INPUTS", "inputs")) / "prep"
    found = sorted(root.rglob(name))
    if not found:
        sys.exit(f"{name}: not under {root}; this step needs prep's outputs (inputs = ['prep'])")
    return found[0]


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    rows = np.loadtxt(find(name), delimiter=",", skiprows=1, ndmin=2)
    return rows[:, :2], rows[:, 2]


def features(x: np.ndarray) -> np.ndarray:
    """Degree-3 polynomial features: a line cannot part two moons, a cubic can."""
    a, b = x[:, 0], x[:, 1]
    cols = [np.ones_like(a)] + [a**i * b**j for i in range(4) for j in range(4 - i) if i + j]
    return np.stack(cols, axis=1)


def loss(w: np.ndarray, f: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(1 / (1 + np.exp(-f @ w)), 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def main() -> None:
    hyper = json.loads(os.environ.get("FLEET_HYPER") or "{}")
    lr, l2 = float(hyper.get("lr", 0.1)), float(hyper.get("l2", 1e-3))
    epochs = int(hyper.get("epochs", 30))
    full = "--full" in sys.argv
    (xt, yt), (xv, yv) = load("train.csv"), load("valid.csv")
    if full:  # the final model learns from every row; valid_loss is then a training figure
        xt, yt = np.concatenate([xt, xv]), np.concatenate([yt, yv])
    ft, fv = features(xt), features(xv)
    w = np.zeros(ft.shape[1])
    for epoch in range(1, epochs + 1):
        p = 1 / (1 + np.exp(-ft @ w))
        w -= lr * (ft.T @ (p - yt) / len(yt) + l2 * w)
        accuracy = float(np.mean(((fv @ w) > 0) == yv))
        metric = {"epoch": epoch, "train_loss": loss(w, ft, yt), "valid_loss": loss(w, fv, yv)}
        print(f"FLEET_METRIC {json.dumps({**metric, 'valid_accuracy': accuracy})}", flush=True)
    out = Path(os.environ.get("FLEET_OUTPUT_DIR", "out"))
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "model.npz", w=w)
    (out / "params.json").write_text(json.dumps({"lr": lr, "l2": l2, "epochs": epochs}))


if __name__ == "__main__":
    main()
