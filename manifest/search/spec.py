"""A published search: ``SearchSpec`` (its base job, its config, its id), the ids of its
trials, and the one owner of a trial's name, ``NAME[trial=N]``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from core.ids import short_id
from manifest.schema import JobSpec
from manifest.search.config import SearchConfig


def trial_name(search_name: str, number: int) -> str:
    """Trial ``number``'s job name: ``tune[trial=3]`` (the one place that writes it; a trial
    is known by its record's ``search`` and ``trial`` fields, never by parsing its name)."""
    return f"{search_name}[trial={number}]"


def trial_job_id(search_id: str, number: int) -> str:
    """A trial's job ID: from its search and its number only."""
    return hashlib.sha256(f"search:{search_id}:trial:{number}".encode()).hexdigest()


def search_id(base_canonical: bytes, config: SearchConfig) -> str:
    """The digest of the base job's canonical content (manifest.ids) and the search's settings."""
    doc = json.dumps(config.to_dict(), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(b"search:" + base_canonical + b"\n" + doc).hexdigest()


@dataclass(frozen=True)
class SearchSpec:
    """One search: its base job (name, fixed hyper, needs) and its settings and space."""

    search_id: str
    base: JobSpec  # the job every trial is, before the trial's values go into hyper
    config: SearchConfig

    @property
    def name(self) -> str:
        return self.base.name

    def trial_name(self, number: int) -> str:
        return trial_name(self.base.name, number)

    def describe(self) -> list[str]:
        """What `publish --dry-run` shows: the budget, how many at once, the sampler and
        pruner with every argument they are built with, the space."""
        c = self.config
        last = f", last step {c.last_step}" if c.last_step is not None else ""
        lines = [
            f"search {self.name} ({short_id(self.search_id)}): {c.trials} trials, "
            f"at most {c.parallel} at once, {c.direction.value} {c.metric}{last}, "
            f"stops after {c.max_failures} failed in a row",
            f"  sampler {c.sampler.text()}",
            f"  pruner {c.pruner.text()}",
        ]
        if c.pbt is not None:
            lines.append(f"  scheduler {c.pbt.text()}")
        lines += [f"  {k}: {v.text()}" for k, v in c.space.items()]
        return lines
