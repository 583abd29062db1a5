"""A PBT search's manifest, built from the few things a test varies (``population_manifest``)."""

from __future__ import annotations


def population_manifest(
    name: str = "pop",
    *,
    population: int = 4,
    last_step: int = 30,
    interval: int = 10,
    command: tuple[str, ...] = ("python", "train.py"),
    space: str = "lr = { low = 0.001, high = 0.1, log = true }",
    seed: int = 1,
) -> str:
    """One `[[jobs]]` entry of a PBT search whose job checkpoints ``ckpt/``."""
    argv = ", ".join(f'"{a}"' for a in command)
    scheduler = f'{{ name = "pbt", interval = {interval} }}'
    return "\n".join(
        [
            "[[jobs]]",
            f'name = "{name}"',
            f"command = [{argv}]",
            'checkpoint = "ckpt/"',
            "[jobs.search]",
            'metric = "loss"',
            f"population = {population}",
            f"last_step = {last_step}",
            f"seed = {seed}",
            f"scheduler = {scheduler}",
            "[jobs.search.space]",
            space,
            "",
        ]
    )
