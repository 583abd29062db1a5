"""The ``gbt`` trainer: gradient-boosted trees with xgboost. Runs inside the trainer subprocess."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import xgboost as xgb

from trainers.data import DataError, Table
from trainers.protocol import GBT_MODEL_FILE, format_metric_line
from trainers.scores import as_two_columns, classification_scores, regression_scores

REPORT_EVERY_ROUNDS = 10
EVAL_METRIC = {
    "binary:logistic": "logloss",
    "multi:softprob": "mlogloss",
    "reg:squarederror": "rmse",
}


def task_of(objective: str) -> str | None:
    """The task an explicit objective implies; None for 'auto'."""
    return (
        None
        if objective == "auto"
        else ("regression" if objective.startswith("reg:") else "classification")
    )


def pick_objective(objective: str, classes: tuple) -> str:
    if objective == "auto":
        return (
            "reg:squarederror"
            if not classes
            else ("binary:logistic" if len(classes) == 2 else "multi:softprob")
        )
    if objective == "binary:logistic" and len(classes) != 2:
        raise DataError(
            f"objective 'binary:logistic' needs 2 classes, the target has "
            f"{len(classes)}; use 'multi:softprob' or 'auto'"
        )
    return objective


def cuda_usable() -> bool:
    """True when xgboost really trains on a GPU here (it silently falls back to CPU otherwise)."""
    if not xgb.build_info().get("USE_CUDA"):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = xgb.DMatrix(np.zeros((2, 1), np.float32), label=[0.0, 1.0])
        booster = xgb.train({"device": "cuda", "tree_method": "hist"}, probe, 1)
    return '"device":"cuda' in booster.save_config().replace(" ", "")


class Reporter(xgb.callback.TrainingCallback):
    """Prints a FLEET_METRIC line every REPORT_EVERY_ROUNDS rounds and at the last one."""

    def __init__(self, rounds: int, metric: str):
        super().__init__()
        self.rounds, self.metric, self.last = rounds, metric, None

    def after_iteration(self, model, epoch: int, evals_log) -> bool:
        done = epoch + 1
        self.last = (done, evals_log)
        if done % REPORT_EVERY_ROUNDS == 0 or done == self.rounds:
            self.report(done, evals_log)
        return False

    def after_training(self, model):
        if self.last and self.last[0] % REPORT_EVERY_ROUNDS and self.last[0] != self.rounds:
            self.report(*self.last)  # stopped early between two reports
        return model

    def report(self, done: int, evals_log) -> None:
        print(
            format_metric_line(
                {
                    "round": done,
                    "rounds": self.rounds,
                    "metric": self.metric,
                    "train_loss": float(evals_log["train"][self.metric][-1]),
                    "valid_loss": float(evals_log["valid"][self.metric][-1]),
                }
            ),
            flush=True,
        )


def train(
    train: Table,
    valid: Table,
    hyper: dict,
    *,
    seed: int,
    device: str,
    output_dir: Path,
    threads: int = 0,
) -> dict:
    """Train, save ``model.ubj`` cut at the best round, and return the metrics."""
    objective = pick_objective(hyper["objective"], train.classes)
    params = {
        "objective": objective,
        "eval_metric": EVAL_METRIC[objective],
        "seed": seed,
        "device": device,
        "tree_method": "hist",
        "max_depth": hyper["max_depth"],
        "learning_rate": hyper["learning_rate"],
        "subsample": hyper["subsample"],
        "colsample_bytree": hyper["colsample_bytree"],
        "reg_lambda": hyper["reg_lambda"],
        "min_child_weight": hyper["min_child_weight"],
    }
    if objective == "multi:softprob":
        params["num_class"] = len(train.classes)
    if threads:
        params["nthread"] = threads  # the cores the job holds, no more
    names = list(train.feature_names)
    dtrain = xgb.DMatrix(train.x, label=train.y, feature_names=names)
    dvalid = xgb.DMatrix(valid.x, label=valid.y, feature_names=names)
    rounds = hyper["n_estimators"]
    booster = xgb.train(
        params,
        dtrain,
        num_boost_round=rounds,
        evals=[(dtrain, "train"), (dvalid, "valid")],
        early_stopping_rounds=hyper["early_stopping_rounds"] or None,
        callbacks=[Reporter(rounds, EVAL_METRIC[objective])],
        verbose_eval=False,
    )
    trained = booster.num_boosted_rounds()
    best = booster.best_iteration if hyper["early_stopping_rounds"] else trained - 1
    booster = booster[: best + 1]  # the saved model is the best one, not the last
    task = "classification" if train.classes else "regression"
    booster.set_attr(fleet_task=task, fleet_classes=json.dumps(list(train.classes)))
    booster.save_model(str(output_dir / GBT_MODEL_FILE))
    return {
        "best_iteration": best,
        "rounds_trained": trained,
        "train": _scores(booster, dtrain, train),
        "valid": _scores(booster, dvalid, valid),
    }


def _scores(booster: xgb.Booster, matrix: xgb.DMatrix, table: Table) -> dict[str, float]:
    pred = booster.predict(matrix)
    if table.classes:
        return classification_scores(table.y, as_two_columns(pred))
    return regression_scores(table.y, pred)
