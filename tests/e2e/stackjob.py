"""A job on a real training stack, for tests/e2e/test_stacks*.py: ``stackjob.py STACK PAUSE``
trains a tiny model of ``lightning``, ``hf`` (a transformers Trainer), ``ddp`` (torchrun, two
ranks on gloo), ``sklearn`` (n_jobs=-1), ``xgboost`` or ``plain`` (no stack) for
``hyper.epochs`` epochs, PAUSE seconds a step, with its progress bar on, reporting through
fleet's glue (trainers/report.py, trainers/lightning.py, trainers/hf.py) and checkpointing
in the stack's own way into FLEET_CHECKPOINT_DIR, from which a rerun resumes. Nothing is
downloaded: models from configs, data made here, the same every run.

What its processes did goes to TRUTH_FILE (tests/harness/truth.py): start, PIDs, end, the
threads each process used, and ``result``, a loss on fixed data after training that a resumed
run must match. A search's trial N adds 10 * N to its reported loss (so a median pruner that
saw trial 0 prunes it) and, past its first epoch, waits for trial 0 to end and then steps
slowly (so it is still running when the search records trial 0's end, however long each
took to import its stack). With STACK_GATE=hold,
a first run stops moving past its first epoch (checkpointed) until it is stopped: a test
preempts or cancels it mid-training without racing a short run.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # fleet's glue, the harness

from tests.harness.truth import Truth  # noqa: E402
from trainers.report import report, use_cores  # noqa: E402

NAME = os.environ.get("FLEET_JOB_NAME", "local")
TRIAL = int(m.group(1)) if (m := re.search(r"\[trial=(\d+)\]", NAME)) else 0
OFFSET = 10.0 * TRIAL
CKPT = Path(os.environ.get("FLEET_CHECKPOINT_DIR") or "ckpt-local")
LATE_TRIAL_STEP_S = 2.0
# files its checkpoint dir held at the start: a resumed run's are there
RESUMED_FROM = sum(1 for p in CKPT.rglob("*") if p.is_file())


def trial_0_ended() -> bool:
    first = NAME.replace(f"[trial={TRIAL}]", "[trial=0]")
    path = Path(os.environ.get("TRUTH_FILE", "/nonexistent"))
    return path.exists() and any(
        f'"job": "{first}", "event": "end"' in line for line in path.read_text().splitlines()
    )


def pace(pause: float, epoch: int) -> None:
    """A step's pause, and the gates of the module docstring from ``epoch`` 1 on."""
    time.sleep(pause)
    if epoch < 1:
        return
    if os.environ.get("STACK_GATE") == "hold" and not RESUMED_FROM:
        while True:
            time.sleep(0.1)
    while TRIAL and not trial_0_ended():
        time.sleep(0.1)
    if TRIAL:  # slow, so that the search hears of trial 0's end while this one still runs
        time.sleep(LATE_TRIAL_STEP_S)


def threads() -> dict:
    """What this process uses: its cores, its threads, each thread pool's size."""
    import psutil

    seen = {
        "affinity": sorted(os.sched_getaffinity(0)),
        "threads": psutil.Process().num_threads(),
    }
    if "torch" in sys.modules:
        seen["torch_threads"] = sys.modules["torch"].get_num_threads()
    if "joblib" in sys.modules:
        seen["n_jobs"] = sys.modules["joblib"].effective_n_jobs(-1)
    try:
        from threadpoolctl import threadpool_info

        seen["pools"] = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    except ImportError:
        pass
    return seen


def save(path: Path, write) -> None:
    """Written whole, then renamed: a checkpoint sync never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    tmp.replace(path)


def torch_data():
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    return x, x @ torch.linspace(-1, 1, 8).unsqueeze(1)


def lightning(epochs: int, pause: float) -> float:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    use_cores()
    from trainers.lightning import FleetMetrics, checkpoint_callback, pl, resume_path

    pl.seed_everything(0)
    x, y = torch_data()

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, _):
            pace(pause, self.current_epoch)
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("loss", loss.detach() + OFFSET, on_step=False, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    model = Model()
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=True,  # the bar on: its \r-drawn lines share the output
        enable_model_summary=False,
        # tqdm's bar, not Rich's, which Lightning picks where rich is installed
        callbacks=[pl.callbacks.TQDMProgressBar(), FleetMetrics(), checkpoint_callback()],
    )
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=16), ckpt_path=resume_path())
    with torch.no_grad():
        return F.mse_loss(model.net(x), y).item()


def hf(epochs: int, pause: float) -> float:
    import torch

    use_cores()
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from trainers.hf import FleetMetrics, output_dir, resume_path

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)  # random weights from a config
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 32, (32, 8), generator=g)
    labels = ids[:, 0] % 2
    data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(len(ids))]

    class Pace(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            pace(pause, (state.global_step - 1) // 4)  # 4 steps an epoch

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:  # before FleetMetrics prints it: a trial's offset
                logs["loss"] += OFFSET

    args = TrainingArguments(
        output_dir=output_dir(),
        num_train_epochs=epochs,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        logging_strategy="epoch",
        save_strategy="epoch",
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=False,  # the bar on
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=data, callbacks=[Pace(), FleetMetrics()]
    )
    trainer.train(resume_from_checkpoint=resume_path())
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids, labels=labels).loss.item()


def ddp(epochs: int, pause: float) -> None:
    """The launcher: torchrun starts two ranks of this script on this host."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run([*argv, __file__, "ddp-rank", sys.argv[2]], check=False)
    if done.returncode:
        sys.exit(done.returncode)


def ddp_rank(epochs: int, pause: float) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    use_cores()  # this rank's share of the job's cores
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    x, y = torch_data()
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    path, start = CKPT / "ddp.pt", 0
    if path.exists():
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
    mine = slice(rank * 32, rank * 32 + 32)
    epochs_bar = range(start, epochs)
    if rank == 0:
        from tqdm import tqdm

        epochs_bar = tqdm(epochs_bar, initial=start, total=epochs)
    for epoch in epochs_bar:
        for i in range(0, 32, 16):
            pace(pause, epoch)
            opt.zero_grad()
            loss = F.mse_loss(model(x[mine][i : i + 16]), y[mine][i : i + 16])
            loss.backward()
            opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            state = {"model": model.module.state_dict(), "opt": opt.state_dict(), "epoch": epoch}
            save(path, lambda p, s=state: torch.save(s, p))
            report({"epoch": epoch, "loss": total.item() / 2 + OFFSET})
    seen = Truth(Path(os.environ["TRUTH_FILE"]), NAME) if os.environ.get("TRUTH_FILE") else None
    if seen:
        seen.note(rank=rank, **threads())
        if rank == 0:
            with torch.no_grad():
                seen.note(result=F.mse_loss(model.module(x), y).item())
    dist.destroy_process_group()


def sklearn(epochs: int, pause: float) -> float:
    use_cores()
    import joblib
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.model_selection import cross_val_score
    from tqdm import tqdm

    X, y = make_classification(n_samples=300, n_features=8, random_state=0)
    path = CKPT / "forest.joblib"
    forest = (
        joblib.load(path)
        if path.exists()
        else RandomForestClassifier(
            n_estimators=0, warm_start=True, max_depth=4, random_state=0, n_jobs=-1
        )
    )
    start = len(getattr(forest, "estimators_", ())) // 4
    for epoch in tqdm(range(start, epochs), initial=start, total=epochs):
        pace(pause, epoch)
        forest.n_estimators = 4 * (epoch + 1)  # warm start: 4 trees more an epoch
        forest.fit(X, y)
        save(path, lambda p: joblib.dump(forest, p))
        # n_jobs=-1 through loky's processes: as many as the job's cores
        cv = cross_val_score(LogisticRegression(), X, y, cv=2, n_jobs=-1).mean()
        loss = log_loss(y, forest.predict_proba(X))
        report({"epoch": epoch, "loss": loss + OFFSET, "cv": cv})
    return log_loss(y, forest.predict_proba(X))


def xgboost(epochs: int, pause: float) -> float:
    use_cores()
    import numpy as np
    import xgboost as xgb
    from tqdm import tqdm

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8))
    dtrain = xgb.DMatrix(X, label=X @ np.linspace(-1, 1, 8) + rng.normal(0, 0.1, 300))
    params = {"tree_method": "hist", "max_depth": 3, "eta": 0.3, "seed": 0}  # threads: OMP
    path = CKPT / "model.ubj"
    booster = xgb.Booster(model_file=str(path)) if path.exists() else None
    start = booster.num_boosted_rounds() // 4 if booster else 0
    for epoch in tqdm(range(start, epochs), initial=start, total=epochs):
        pace(pause, epoch)
        booster = xgb.train(params, dtrain, num_boost_round=4, xgb_model=booster)
        save(path, lambda p, b=booster: b.save_model(str(p)))
        rmse = float(booster.eval(dtrain).split(":")[1])
        report({"epoch": epoch, "loss": rmse + OFFSET})
    return float(booster.eval(dtrain).split(":")[1])


def plain(epochs: int, pause: float) -> float:
    """No stack: a metric line an epoch; its result is its data's bytes, or 1 / epochs."""
    data = Path(os.environ.get("FLEET_DATA_PATH") or "/nonexistent")
    files = [data] if data.is_file() else [p for p in data.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    for epoch in range(epochs):
        pace(pause, epoch)
        report({"epoch": epoch, "loss": 1 / (epoch + 1) + OFFSET})
    return size or 1 / epochs


def barred(epochs: int, pause: float) -> float:
    """A bar on stdout, as Lightning draws it, and metric lines printed plainly behind it, as
    a job without fleet's glue prints them: each starts on the bar's unfinished line."""
    from tqdm import tqdm

    from trainers.protocol import format_metric_line

    for epoch in tqdm(range(epochs), file=sys.stdout):
        pace(pause, epoch)
        print(format_metric_line({"epoch": epoch, "loss": 1 / (epoch + 1)}), flush=True)
    return 1 / epochs


STACKS = {
    "plain": plain,
    "barred": barred,
    "lightning": lightning,
    "hf": hf,
    "sklearn": sklearn,
    "xgboost": xgboost,
}


def main() -> None:
    import json

    stack, pause = sys.argv[1], float(sys.argv[2])
    epochs = int(json.loads(os.environ.get("FLEET_HYPER") or "{}").get("epochs", 4))
    if stack == "ddp-rank":
        ddp_rank(epochs, pause)
        return
    truth = Truth.begin()
    if truth:
        truth.note(resumed_from=RESUMED_FROM)
    result = ddp(epochs, pause) if stack == "ddp" else STACKS[stack](epochs, pause)
    if truth and stack != "ddp":  # the ranks noted theirs
        truth.note(result=result, rank=0, **threads())
    if stack != "ddp":
        print(f"result {result}", flush=True)


if __name__ == "__main__":
    main()
