"""Tabular data for the built-in trainers: load a file, pick features and labels, split.

Imports pandas, so only the trainer subprocess uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from core.errors import FleetError

READERS = {".csv": pd.read_csv, ".parquet": pd.read_parquet, ".pq": pd.read_parquet}
MAX_CLASSES_FOR_INT_LABELS = 20  # an integer target with more distinct values is a regression


class DataError(FleetError):
    """Raised when a dataset cannot be read or does not fit the job (missing target, no rows)."""


@dataclass(frozen=True)
class Table:
    """Features and labels ready to train on; ``classes`` is empty for a regression."""

    x: np.ndarray  # float32, (rows, features); NaN where missing
    y: np.ndarray  # class index (int64) or value (float32)
    feature_names: tuple[str, ...]
    classes: tuple = ()


def load_table(path: str | Path) -> pd.DataFrame:
    """Read a .csv or .parquet file into a DataFrame, chosen by suffix."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(
            f"{path}: unsupported file type {path.suffix!r}; use one of {', '.join(READERS)}"
        )
    try:
        return reader(path)
    except FileNotFoundError as e:
        raise DataError(f"{path}: no such file") from e
    except Exception as e:  # pandas and pyarrow raise many kinds for a corrupt file
        raise DataError(f"{path}: cannot read as {path.suffix}: {e}") from e


def split(
    df: pd.DataFrame, target: str, valid_fraction: float, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, valid) rows, shuffled by ``seed``; the same inputs always give the same split."""
    check_target(df, target)
    n_valid = int(round(len(df) * valid_fraction))
    if len(df) < 2 or not 1 <= n_valid < len(df):
        raise DataError(
            f"{len(df)} row(s) cannot be split with valid_fraction={valid_fraction}; "
            "the dataset needs more rows"
        )
    order = np.random.default_rng(seed).permutation(len(df))
    return df.iloc[order[n_valid:]], df.iloc[order[:n_valid]]


def check_target(df: pd.DataFrame, target: str) -> None:
    if target not in df.columns:
        raise DataError(
            f"target column {target!r} not found; columns are: "
            f"{', '.join(map(str, df.columns))}; set hyper.target to one of them"
        )
    if df[target].isna().any():
        raise DataError(
            f"target column {target!r} has {int(df[target].isna().sum())} missing "
            "value(s); drop those rows first"
        )
    features = [c for c in df.columns if c != target]
    if not features:
        raise DataError(f"no feature columns besides target {target!r}")
    bad = [str(c) for c in features if not _numeric(df[c])]
    if bad:
        raise DataError(
            f"non-numeric feature column(s): {', '.join(bad)}; encode them as numbers or drop them"
        )


def infer_task(labels: pd.Series) -> str:
    """'classification' for bool, text or few-valued integer labels, else 'regression'."""
    if pd.api.types.is_bool_dtype(labels) or not pd.api.types.is_numeric_dtype(labels):
        return "classification"
    if pd.api.types.is_integer_dtype(labels) and labels.nunique() <= MAX_CLASSES_FOR_INT_LABELS:
        return "classification"
    return "regression"


def label_classes(labels: pd.Series) -> tuple:
    """Sorted distinct labels as plain Python values (JSON-safe)."""
    return tuple(v.item() if hasattr(v, "item") else v for v in sorted(labels.unique()))


def to_table(df: pd.DataFrame, target: str, classes: tuple = ()) -> Table:
    """Features as float32 and labels encoded against ``classes`` (none: a regression)."""
    features = tuple(str(c) for c in df.columns if c != target)
    x = df.drop(columns=[target]).to_numpy(dtype=np.float32, na_value=np.nan)
    if classes:
        index = {c: i for i, c in enumerate(classes)}
        y = np.array([index[v.item() if hasattr(v, "item") else v] for v in df[target]], np.int64)
    else:
        if not pd.api.types.is_numeric_dtype(df[target]) or pd.api.types.is_bool_dtype(df[target]):
            raise DataError(f"target column {target!r} is not numeric; a regression needs numbers")
        y = df[target].to_numpy(dtype=np.float32)
    return Table(x, y, features, classes)


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)
