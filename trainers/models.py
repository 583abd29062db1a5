"""Load a model a built-in trainer saved, and predict with it.

xgboost and torch are imported only when a model of that kind is built or loaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainers.protocol import GBT_MODEL_FILE, MLP_MODEL_FILE
from trainers.scores import as_two_columns


class TrainedModel:
    """A loaded model: ``predict`` gives labels (classification) or values (regression)."""

    kind = ""

    def __init__(self, task: str, feature_names: Sequence[str], classes: Sequence = ()):
        self.task, self.feature_names, self.classes = task, tuple(feature_names), tuple(classes)

    def predict(self, x: Any) -> np.ndarray:
        raw = self._raw(self._matrix(x))
        if self.task == "regression":
            return raw
        return np.asarray(self.classes)[raw.argmax(axis=1)]

    def predict_proba(self, x: Any) -> np.ndarray:
        """Class probabilities, (rows, classes); only for a classifier."""
        if self.task != "classification":
            raise TypeError(f"a {self.task} model has no class probabilities; use predict")
        return self._raw(self._matrix(x))

    def _matrix(self, x: Any) -> np.ndarray:
        if hasattr(x, "columns"):  # a DataFrame: pick and order the training features by name
            missing = [c for c in self.feature_names if c not in x.columns]
            if missing:
                raise ValueError(f"missing feature column(s): {', '.join(missing)}")
            x = x[list(self.feature_names)].to_numpy(dtype=np.float32, na_value=np.nan)
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != len(self.feature_names):
            raise ValueError(f"expected (rows, {len(self.feature_names)}) features, got {x.shape}")
        return x

    def _raw(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class GbtModel(TrainedModel):
    kind = "gbt"

    def __init__(self, booster: Any):
        attrs = booster.attributes()
        super().__init__(
            attrs["fleet_task"],
            booster.feature_names or (),
            json.loads(attrs.get("fleet_classes", "[]")),
        )
        self.booster = booster

    def _raw(self, x: np.ndarray) -> np.ndarray:
        import xgboost

        out = self.booster.predict(xgboost.DMatrix(x, feature_names=list(self.feature_names)))
        return as_two_columns(out) if self.task == "classification" else out


class MlpModel(TrainedModel):
    kind = "mlp"

    def __init__(self, saved: dict):
        super().__init__(saved["task"], saved["feature_names"], saved["classes"])
        self.net = build_mlp(
            saved["in_features"],
            saved["hidden_sizes"],
            saved["out_features"],
            saved.get("dropout", 0.0),
        )
        self.net.load_state_dict(saved["state_dict"])
        self.net.eval()
        self.x_mean, self.x_std = np.float32(saved["x_mean"]), np.float32(saved["x_std"])
        self.y_mean, self.y_std = saved["y_mean"], saved["y_std"]

    def _raw(self, x: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            out = self.net(torch.from_numpy(standardize(x, self.x_mean, self.x_std))).numpy()
        if self.task == "classification":
            return torch.softmax(torch.from_numpy(out), dim=1).numpy()
        return out[:, 0] * self.y_std + self.y_mean


def standardize(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Scale features by the training mean and std; a missing value becomes the mean (0)."""
    return np.nan_to_num((x - mean) / std, nan=0.0).astype(np.float32)


def build_mlp(
    in_features: int, hidden_sizes: Sequence[int], out_features: int, dropout: float = 0.0
) -> Any:
    """Linear -> ReLU (-> Dropout) per hidden layer, then a linear output layer."""
    from torch import nn

    layers: list = []
    width = in_features
    for size in hidden_sizes:
        layers += [nn.Linear(width, size), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = size
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)


def load_model(path: str | Path) -> TrainedModel:
    """Load ``model.ubj`` or ``model.pt``, given the file or the output folder holding it."""
    path = Path(path)
    if path.is_dir():
        found = [path / n for n in (GBT_MODEL_FILE, MLP_MODEL_FILE) if (path / n).is_file()]
        if len(found) != 1:
            raise FileNotFoundError(
                f"{path}: expected exactly one of {GBT_MODEL_FILE}, "
                f"{MLP_MODEL_FILE}; found {len(found)}"
            )
        path = found[0]
    if path.suffix == ".ubj":
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(str(path))
        return GbtModel(booster)
    if path.suffix == ".pt":
        import torch

        return MlpModel(torch.load(path, map_location="cpu", weights_only=True))
    raise ValueError(f"{path}: not a model file; expected {GBT_MODEL_FILE} or {MLP_MODEL_FILE}")
