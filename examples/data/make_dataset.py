"""Writes the small example datasets next to this file; deterministic, so re-running is a no-op.

    python examples/data/make_dataset.py

moons.csv / moons.parquet: binary classification, two interleaving half moons
(x1, x2) with Gaussian noise plus two pure-noise features, label column ``target``.
housing_small.csv: synthetic house prices (thousands) from size, rooms, age and
location, label column ``target``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
SEED = 20240501
MOONS_ROWS = 2000
HOUSING_ROWS = 1500
MOONS_NOISE = 0.25


def moons(rng: np.random.Generator, n: int = MOONS_ROWS) -> pd.DataFrame:
    half = n // 2
    t_outer = rng.uniform(0, np.pi, half)
    t_inner = rng.uniform(0, np.pi, n - half)
    x1 = np.concatenate([np.cos(t_outer), 1 - np.cos(t_inner)])
    x2 = np.concatenate([np.sin(t_outer), 0.5 - np.sin(t_inner)])
    target = np.concatenate([np.zeros(half, int), np.ones(n - half, int)])
    df = pd.DataFrame(
        {
            "x1": x1 + rng.normal(0, MOONS_NOISE, n),
            "x2": x2 + rng.normal(0, MOONS_NOISE, n),
            "noise1": rng.normal(0, 1, n),
            "noise2": rng.uniform(-1, 1, n),
            "target": target,
        }
    )
    return df.sample(frac=1.0, random_state=SEED).reset_index(drop=True).round(4)


def housing(rng: np.random.Generator, n: int = HOUSING_ROWS) -> pd.DataFrame:
    sqft = rng.lognormal(np.log(1700), 0.35, n).clip(450, 6000)
    bedrooms = np.clip(np.round(sqft / 650 + rng.normal(0, 0.7, n)), 1, 7).astype(int)
    bathrooms = np.clip(np.round(bedrooms * 0.6 + rng.normal(0, 0.5, n) * 2) / 2, 1, 5)
    age_years = rng.gamma(2.0, 15.0, n).clip(0, 120).round()
    distance_km = rng.gamma(2.0, 6.0, n).clip(0.5, 80)
    garage = (rng.uniform(0, 1, n) < 0.65).astype(int)
    price = (
        60
        + 0.17 * sqft
        + 12 * bathrooms
        + 5 * bedrooms
        - 0.9 * age_years
        + 180 * np.exp(-distance_km / 8)
        + 18 * garage
    )
    price *= rng.lognormal(0, 0.12, n)
    return pd.DataFrame(
        {
            "sqft": sqft.round().astype(int),
            "bedrooms": bedrooms,
            "bathrooms": bathrooms,
            "age_years": age_years.astype(int),
            "distance_km": distance_km.round(2),
            "garage": garage,
            "target": price.clip(40).round(1),
        }
    )


def main() -> None:
    rng = np.random.default_rng(SEED)
    df = moons(rng)
    df.to_csv(HERE / "moons.csv", index=False)
    df.to_parquet(HERE / "moons.parquet", index=False)
    housing(rng).to_csv(HERE / "housing_small.csv", index=False)


if __name__ == "__main__":
    main()
