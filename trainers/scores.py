"""Scores reported in metrics.json, computed the same way for every trainer (numpy only)."""

from __future__ import annotations

import numpy as np

PROB_EPS = 1e-15  # clip probabilities so log loss stays finite


def classification_scores(y: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """Accuracy and log loss for class indices ``y`` and probabilities ``proba`` (rows, classes)."""
    proba = np.clip(proba, PROB_EPS, 1.0)
    picked = proba[np.arange(len(y)), y]
    return {
        "accuracy": float(np.mean(proba.argmax(axis=1) == y)),
        "logloss": float(-np.mean(np.log(picked))),
    }


def regression_scores(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """RMSE and R² (0 when ``y`` is constant, where R² is undefined)."""
    y, pred = np.asarray(y, np.float64), np.asarray(pred, np.float64)
    residual = float(np.sum((y - pred) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    return {
        "rmse": float(np.sqrt(residual / len(y))),
        "r2": 1.0 - residual / total if total > 0 else 0.0,
    }


def as_two_columns(proba: np.ndarray) -> np.ndarray:
    """A binary model's P(class 1) as (rows, 2) so every classifier reports the same shape."""
    return np.column_stack([1.0 - proba, proba]) if proba.ndim == 1 else proba
