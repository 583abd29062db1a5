"""The helper module train.py imports: data and a gradient-descent line fit."""

import numpy as np


def make_points(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    return x, 3.0 * x + 0.5 + rng.normal(0, 0.1, n)


def fit(x: np.ndarray, y: np.ndarray, steps: int, lr: float = 0.1) -> tuple[float, float, float]:
    slope = intercept = 0.0
    for _ in range(steps):
        err = slope * x + intercept - y
        slope -= lr * 2 * float(np.mean(err * x))
        intercept -= lr * 2 * float(np.mean(err))
    return slope, intercept, float(np.mean((slope * x + intercept - y) ** 2))
