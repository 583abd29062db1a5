"""The ``mlp`` trainer: a multilayer perceptron with torch. Runs inside the trainer subprocess."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from core.files import atomic_file
from manifest.hyper import parse_hidden_sizes
from trainers import distributed
from trainers.data import Table
from trainers.distributed import World
from trainers.models import build_mlp, standardize
from trainers.protocol import MLP_MODEL_FILE, format_metric_line
from trainers.scores import classification_scores, regression_scores

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
SGD_MOMENTUM = 0.9  # plain SGD without momentum barely moves in a few epochs
STATE_FILE = "mlp-state.pt"  # in FLEET_CHECKPOINT_DIR: everything needed to resume after an epoch


def train(
    train: Table,
    valid: Table,
    hyper: dict,
    *,
    seed: int,
    device: str,
    output_dir: Path,
    checkpoint_dir: Path | None = None,
    world: World = World(),
) -> dict:
    """Train for ``epochs``, save ``model.pt`` (weights plus architecture), return the metrics.

    With ``checkpoint_dir``, the state after every epoch (weights, optimizer, RNGs, epoch) is
    saved there, and a run that finds one resumes after that epoch and ends with the very
    model an uninterrupted run would have. With a distributed ``world`` every rank trains a
    DistributedDataParallel copy on its shard; rank 0 alone reports and writes."""
    classify = bool(train.classes)
    x_mean, x_std = _moments(train.x)
    y_mean, y_std = (0.0, 1.0) if classify else (float(train.y.mean()), float(train.y.std() or 1))
    xt, yt = _tensors(train, x_mean, x_std, y_mean, y_std, device)
    xv, yv = _tensors(valid, x_mean, x_std, y_mean, y_std, device)
    sizes = parse_hidden_sizes(hyper["hidden_sizes"])
    out_features = len(train.classes) if classify else 1
    net = build_mlp(xt.shape[1], sizes, out_features, hyper["dropout"]).to(device)
    model = net
    if world.distributed:
        ids = [torch.device(device).index] if device.startswith("cuda") else None
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    loss_fn = torch.nn.CrossEntropyLoss() if classify else torch.nn.MSELoss()
    extra = {"momentum": SGD_MOMENTUM} if hyper["optimizer"] == "sgd" else {}
    opt = OPTIMIZERS[hyper["optimizer"]](
        net.parameters(), lr=hyper["learning_rate"], weight_decay=hyper["weight_decay"], **extra
    )
    shuffle = torch.Generator().manual_seed(seed)
    state_path = Path(checkpoint_dir) / STATE_FILE if checkpoint_dir else None
    done = _resume(state_path, model, opt, shuffle, hyper, seed, device)
    say = print if world.main else (lambda *a, **k: None)
    if done:
        say(f"resuming after epoch {done} of {hyper['epochs']} from {state_path}", flush=True)
        say(format_metric_line({"resumed_from_epoch": done}), flush=True)
    for epoch in range(done + 1, hyper["epochs"] + 1):
        train_loss = _epoch(net, opt, loss_fn, xt, yt, hyper["batch_size"], shuffle, world)
        say(
            format_metric_line(
                {
                    "epoch": epoch,
                    "epochs": hyper["epochs"],
                    "train_loss": train_loss,
                    "valid_loss": _loss(model, loss_fn, xv, yv),
                }
            ),
            flush=True,
        )
        if state_path and world.main:
            _save_state(state_path, epoch, model, opt, shuffle, hyper, seed, device)
        distributed.barrier(world)  # no rank runs ahead of a checkpoint it could be resumed from
    net = model
    if not world.main:
        return {}
    torch.save(
        {
            "state_dict": {k: v.cpu() for k, v in net.state_dict().items()},
            "in_features": xt.shape[1],
            "hidden_sizes": list(sizes),
            "out_features": out_features,
            "dropout": hyper["dropout"],
            "task": "classification" if classify else "regression",
            "feature_names": list(train.feature_names),
            "classes": list(train.classes),
            "x_mean": x_mean.tolist(),
            "x_std": x_std.tolist(),
            "y_mean": y_mean,
            "y_std": y_std,
        },
        output_dir / MLP_MODEL_FILE,
    )
    return {
        "epochs": hyper["epochs"],
        "resumed_from_epoch": done,
        "train": _scores(net, xt, train, y_mean, y_std),
        "valid": _scores(net, xv, valid, y_mean, y_std),
    }


def _save_state(
    path: Path, epoch: int, net, opt, shuffle, hyper: dict, seed: int, device: str
) -> None:
    state = {
        "epoch": epoch,
        "hyper": hyper,
        "seed": seed,
        "model": net.state_dict(),
        "optimizer": opt.state_dict(),
        "shuffle": shuffle.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if device.startswith("cuda") else [],
    }
    with atomic_file(path) as tmp:  # a sync (or a kill) never sees half a state
        torch.save(state, tmp)


def _resume(path: Path | None, net, opt, shuffle, hyper: dict, seed: int, device: str) -> int:
    """Load the saved state into ``net``, ``opt`` and the RNGs; the epochs it had done (0: none)."""
    if path is None or not path.is_file():
        return 0
    state = torch.load(path, map_location=device, weights_only=True)
    if state.get("hyper") != hyper or state.get("seed") != seed:
        print(
            f"warning: {path} was saved by a run with other hyperparameters or seed; "
            "starting fresh",
            flush=True,
        )
        return 0
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    shuffle.set_state(state["shuffle"].cpu())
    torch.set_rng_state(state["torch_rng"].cpu())
    if device.startswith("cuda") and state["cuda_rng"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    return int(state["epoch"])


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std ignoring NaN; an empty or constant column gets (0, 1)."""
    with np.errstate(all="ignore"):
        count = np.sum(~np.isnan(x), axis=0)
        mean = np.where(count > 0, np.nansum(x, axis=0) / np.maximum(count, 1), 0.0)
        std = np.sqrt(np.nansum((x - mean) ** 2, axis=0) / np.maximum(count, 1))
    return mean.astype(np.float32), np.where(std > 0, std, 1.0).astype(np.float32)


def _tensors(table: Table, x_mean, x_std, y_mean, y_std, device):
    x = torch.from_numpy(standardize(table.x, x_mean, x_std)).to(device)
    if table.classes:
        return x, torch.from_numpy(table.y).to(device)
    y = ((table.y - y_mean) / y_std).astype(np.float32)
    return x, torch.from_numpy(y).unsqueeze(1).to(device)


def _epoch(
    net, opt, loss_fn, x, y, batch_size: int, shuffle: torch.Generator, world: World = World()
) -> float:
    net.train()
    # every rank draws the same permutation (same generator state) and takes its shard of it
    order = distributed.shard(torch.randperm(len(x), generator=shuffle), world).to(x.device)
    batch_size = -(-batch_size // world.size)  # the global batch stays batch_size
    total = torch.zeros((), device=x.device)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
        total += loss.detach() * len(idx)
    return distributed.mean_over_ranks(float(total), len(order), world, x.device)


def _loss(net, loss_fn, x, y) -> float:
    net.eval()
    with torch.no_grad():
        return float(loss_fn(net(x), y))


def _scores(net, x, table: Table, y_mean: float, y_std: float) -> dict[str, float]:
    net.eval()
    with torch.no_grad():
        out = net(x)
        if table.classes:
            return classification_scores(table.y, torch.softmax(out, dim=1).cpu().numpy())
        return regression_scores(table.y, out[:, 0].cpu().numpy() * y_std + y_mean)
