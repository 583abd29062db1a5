"""Writes breast_cancer.csv, diabetes.csv and wine.csv from scikit-learn's bundled copies.

    pip download scikit-learn --no-deps -d /tmp/skl
    (cd /tmp/skl && unzip -q scikit_learn-*.whl 'sklearn/datasets/data/*')
    python examples/data/import_real_datasets.py /tmp/skl/sklearn/datasets/data

Only the standard library: scikit-learn is not installed, its wheel is just unpacked. Values
are copied as written in the source files (no float reformatting); only the header changes to
readable snake_case names with the label last, in a column named ``target``. Deterministic:
re-running on the same wheel rewrites identical files.
"""

from __future__ import annotations

import csv
import gzip
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Ten nucleus measurements; each has a mean, a standard error and a "worst" (largest) value,
# in that order of blocks (scikit-learn's descr/breast_cancer.rst).
CELL_FEATURES = (
    "radius",
    "texture",
    "perimeter",
    "area",
    "smoothness",
    "compactness",
    "concavity",
    "concave_points",
    "symmetry",
    "fractal_dimension",
)
BREAST_CANCER_COLUMNS = (
    [f"mean_{f}" for f in CELL_FEATURES]
    + [f"{f}_se" for f in CELL_FEATURES]
    + [f"worst_{f}" for f in CELL_FEATURES]
)
# s1..s6 are blood serum measurements (descr/diabetes.rst); raw, unscaled values.
DIABETES_COLUMNS = (
    "age",
    "sex",
    "bmi",
    "bp",
    "s1_tc",
    "s2_ldl",
    "s3_hdl",
    "s4_tch",
    "s5_ltg",
    "s6_glu",
)
WINE_COLUMNS = (
    "alcohol",
    "malic_acid",
    "ash",
    "alcalinity_of_ash",
    "magnesium",
    "total_phenols",
    "flavanoids",
    "nonflavanoid_phenols",
    "proanthocyanins",
    "color_intensity",
    "hue",
    "od280_od315_of_diluted_wines",
    "proline",
)


def bundled_csv(path: Path, columns) -> list[list[str]]:
    """Rows of scikit-learn's ``n_rows,n_features,class names...`` csv.

    Checked against its header.
    """
    with open(path, newline="") as f:
        reader = csv.reader(f)
        n_rows, n_features = (int(v) for v in next(reader)[:2])
        rows = [row for row in reader if row]
    if n_features != len(columns) or len(rows) != n_rows:
        raise SystemExit(
            f"{path}: expected {n_rows} rows x {len(columns)} features, "
            f"got {len(rows)} x {n_features}"
        )
    if any(len(row) != n_features + 1 for row in rows):
        raise SystemExit(f"{path}: a row does not have {n_features} features and a label")
    return rows


def diabetes(src: Path) -> list[list[str]]:
    with gzip.open(src / "diabetes_data_raw.csv.gz", "rt") as f:
        features = [line.split() for line in f if line.strip()]
    with gzip.open(src / "diabetes_target.csv.gz", "rt") as f:
        target = [line.strip() for line in f if line.strip()]
    if len(features) != len(target) or any(len(r) != len(DIABETES_COLUMNS) for r in features):
        raise SystemExit(f"{src}: diabetes features and target do not line up")
    # The target is a whole number stored as 1.51e+02; write it as 151.
    return [row + [str(int(float(t)))] for row, t in zip(features, target, strict=True)]


def write(name: str, columns, rows: list[list[str]]) -> None:
    with open(HERE / name, "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow([*columns, "target"])
        out.writerows(rows)
    print(f"wrote {name}: {len(rows)} rows x {len(columns) + 1} columns")


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    src = Path(argv[0])
    write(
        "breast_cancer.csv",
        BREAST_CANCER_COLUMNS,
        bundled_csv(src / "breast_cancer.csv", BREAST_CANCER_COLUMNS),
    )
    write("diabetes.csv", DIABETES_COLUMNS, diabetes(src))
    write("wine.csv", WINE_COLUMNS, bundled_csv(src / "wine_data.csv", WINE_COLUMNS))


if __name__ == "__main__":
    main(sys.argv[1:])
