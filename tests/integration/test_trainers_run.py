"""``python -m trainers.run`` as a real subprocess on the example data, as a worker runs it."""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip("xgboost")
pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

from tests.harness.trainers import DATA, assert_trained, metric_reports, run_trainer  # noqa: E402
from trainers.models import load_model  # noqa: E402


def test_gbt_trains_a_classifier_on_moons_csv_and_the_model_loads(tmp_path):
    done, out = run_trainer(
        tmp_path, "gbt", {"n_estimators": 30, "early_stopping_rounds": 5}, DATA / "moons.csv"
    )
    metrics = assert_trained(done, out, "model.ubj")
    assert metrics["device"] == "cpu" and metrics["task"] == "classification"
    assert metrics["n_train"] == 1600 and metrics["n_valid"] == 400
    assert 0 <= metrics["best_iteration"] < 30
    for part in ("train", "valid"):
        assert set(metrics[part]) == {"accuracy", "logloss"}
    assert metrics["valid"]["accuracy"] > 0.85  # moons with noise 0.25: trees do ~0.92

    reports = metric_reports(done.stdout)
    assert reports and reports[0]["round"] == 10
    assert {"round", "rounds", "train_loss", "valid_loss"} <= set(reports[0])

    df = pd.read_csv(DATA / "moons.csv")
    model = load_model(out)
    assert model.kind == "gbt" and model.feature_names == ("x1", "x2", "noise1", "noise2")
    assert model.predict(df).shape == (len(df),)
    assert set(model.predict(df)) <= {0, 1}
    assert model.predict_proba(df.drop(columns="target").to_numpy()).shape == (len(df), 2)


def test_gbt_writes_a_checkpoint_sidecar_describing_the_run(tmp_path):
    done, out = run_trainer(tmp_path, "gbt", {"n_estimators": 5}, DATA / "moons.csv")
    assert_trained(done, out, "model.ubj")
    ckpt = json.loads((out / "checkpoint.json").read_text())
    assert ckpt["trainer"] == "gbt" and ckpt["seed"] == 7 and ckpt["job_id"] == "job-1"
    assert ckpt["hyper"]["n_estimators"] == 5 and ckpt["hyper"]["max_depth"] == 6  # resolved
    assert ckpt["feature_names"] == ["x1", "x2", "noise1", "noise2"]
    assert ckpt["data_sha256"] == hashlib.sha256((DATA / "moons.csv").read_bytes()).hexdigest()
    assert ckpt["versions"]["xgboost"] and ckpt["versions"]["numpy"] and ckpt["created"]


def test_gbt_with_the_same_seed_gives_the_same_model(tmp_path):
    hyper = {"n_estimators": 10, "subsample": 0.7, "colsample_bytree": 0.7}
    first, out1 = run_trainer(tmp_path, "gbt", hyper, DATA / "moons.csv", out="a")
    second, out2 = run_trainer(tmp_path, "gbt", hyper, DATA / "moons.csv", out="b")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert (out1 / "model.ubj").read_bytes() == (out2 / "model.ubj").read_bytes()


def test_gbt_trains_a_regressor_on_housing(tmp_path):
    done, out = run_trainer(tmp_path, "gbt", {"n_estimators": 40}, DATA / "housing_small.csv")
    metrics = assert_trained(done, out, "model.ubj")
    assert metrics["task"] == "regression"
    assert set(metrics["valid"]) == {"rmse", "r2"} and metrics["valid"]["r2"] > 0.5
    df = pd.read_csv(DATA / "housing_small.csv")
    assert load_model(out / "model.ubj").predict(df).shape == (len(df),)


def test_mlp_trains_a_classifier_on_moons_parquet_and_the_model_loads(tmp_path):
    done, out = run_trainer(
        tmp_path, "mlp", {"epochs": 3, "hidden_sizes": "16,8"}, DATA / "moons.parquet"
    )
    metrics = assert_trained(done, out, "model.pt")
    assert metrics["device"] == "cpu" and metrics["epochs"] == 3
    for part in ("train", "valid"):
        assert set(metrics[part]) == {"accuracy", "logloss"}

    reports = metric_reports(done.stdout)
    assert [r["epoch"] for r in reports] == [1, 2, 3]
    assert all(r["train_loss"] > 0 and r["valid_loss"] > 0 for r in reports)

    df = pd.read_parquet(DATA / "moons.parquet")
    model = load_model(out)
    assert model.kind == "mlp" and model.task == "classification"
    assert model.predict(df).shape == (len(df),)
    proba = model.predict_proba(df)
    assert proba.shape == (len(df), 2) and abs(proba.sum(axis=1) - 1).max() < 1e-5


def test_mlp_trains_a_regressor_on_housing_with_sgd_and_dropout(tmp_path):
    hyper = {"epochs": 3, "optimizer": "sgd", "dropout": 0.1, "learning_rate": 0.01}
    done, out = run_trainer(tmp_path, "mlp", hyper, DATA / "housing_small.csv")
    metrics = assert_trained(done, out, "model.pt")
    assert metrics["task"] == "regression" and set(metrics["valid"]) == {"rmse", "r2"}
    df = pd.read_csv(DATA / "housing_small.csv")
    model = load_model(out / "model.pt")
    assert model.predict(df.head(17)).shape == (17,)
    ckpt = json.loads((out / "checkpoint.json").read_text())
    assert ckpt["trainer"] == "mlp" and ckpt["versions"]["torch"]


def test_asking_for_cuda_without_a_gpu_warns_and_trains_on_cpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present; this test is about its absence")
    done, out = run_trainer(tmp_path, "gbt", {"n_estimators": 3}, DATA / "moons.csv", device="cuda")
    metrics = assert_trained(done, out, "model.ubj")
    assert "warning" in done.stdout and "training on cpu" in done.stdout
    assert metrics["device"] == "cpu" and metrics["device_requested"] == "cuda"


def test_a_missing_target_column_exits_2_naming_the_column(tmp_path):
    done, out = run_trainer(tmp_path, "gbt", {"target": "label"}, DATA / "moons.csv")
    assert done.returncode == 2
    assert "'label'" in done.stderr and "not found" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (out / "model.ubj").exists()


def test_an_invalid_hyper_exits_2_naming_the_key_and_the_fix(tmp_path):
    done, _ = run_trainer(tmp_path, "mlp", {"lr": 0.1}, DATA / "moons.csv")
    assert done.returncode == 2
    assert "lr" in done.stderr and "learning_rate" in done.stderr


def test_an_unsupported_data_file_exits_2(tmp_path):
    data = tmp_path / "moons.json"
    data.write_text("{}")
    done, _ = run_trainer(tmp_path, "gbt", {}, data)
    assert done.returncode == 2 and ".json" in done.stderr


@pytest.mark.parametrize("model, hyper", [("gbt", {"n_estimators": 5}), ("mlp", {"epochs": 1})])
def test_a_trainer_uses_exactly_the_cores_the_job_holds(tmp_path, monkeypatch, model, hyper):
    monkeypatch.setenv("FLEET_CORES", "1")
    done, out = run_trainer(tmp_path, model, hyper, DATA / "moons.csv")
    assert assert_trained(done, out, "model.ubj" if model == "gbt" else "model.pt")["threads"] == 1
