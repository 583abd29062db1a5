"""Typed, frozen specs that a validated manifest becomes.

Nothing here does I/O; ``manifest.loader`` builds these from TOML.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

from core.constants import DEFAULT_PRIORITY, PREFER_CUDA_GRACE_S
from manifest.dataref import DataSource
from manifest.pipeline import Input, Upstream


@dataclass(frozen=True)
class Needs:
    """What a job needs from a host (or what a tier guarantees as a floor)."""

    require_cuda: bool = False
    min_vram_gib: float = 0.0  # per GPU; with share_gpu, the VRAM budget on its one GPU
    min_ram_gib: float = 0.0
    min_cores: int = 0
    gpus: int = 0  # GPUs on one host; a CUDA job that leaves it out gets 1
    share_gpu: bool = False  # may share one GPU with other sharing jobs, by VRAM budget

    @property
    def gpu_count(self) -> int:
        """GPUs the job takes: ``gpus``, at least 1 for a CUDA job, 0 otherwise."""
        return max(1, self.gpus) if self.require_cuda else 0

    def to_dict(self) -> dict[str, Any]:
        """As a dict, leaving out the GPU fields at their defaults.

        (For older readers, and stable digests.)
        """
        d = asdict(self)
        if not self.gpus:
            del d["gpus"]
        if not self.share_gpu:
            del d["share_gpu"]
        return d


@dataclass(frozen=True)
class TierSpec:
    """A capability tier: its queue has exactly this name."""

    name: str
    floor: Needs

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.floor.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TierSpec:
        return cls(
            d["name"],
            Needs(
                d.get("require_cuda", False),
                float(d.get("min_vram_gib", 0)),
                float(d.get("min_ram_gib", 0)),
                int(d.get("min_cores", 0)),
                int(d.get("gpus", 0)),
                bool(d.get("share_gpu", False)),
            ),
        )


# Floors of the default tiers, documented in the README. RAM floors are modest on
# purpose: they keep a 4 GiB laptop off GPU work without excluding home machines, and sit
# under the nominal sizes because a "16 GB" machine reports about 15.5 GiB to the OS.
DEFAULT_TIERS: tuple[TierSpec, ...] = (
    TierSpec("cuda-large", Needs(require_cuda=True, min_vram_gib=24, min_ram_gib=14)),
    TierSpec("cuda", Needs(require_cuda=True, min_vram_gib=8, min_ram_gib=7)),
    TierSpec("cpu", Needs(require_cuda=False, min_ram_gib=2, min_cores=1)),
)


def demand(floor: Needs) -> tuple:
    """Sort key: a larger tuple is a more demanding floor."""
    return (
        floor.require_cuda,
        floor.gpu_count,
        floor.min_vram_gib,
        floor.min_ram_gib,
        floor.min_cores,
    )


def ordered(tiers: Iterable[TierSpec]) -> tuple[TierSpec, ...]:
    """Tiers, most demanding first (ties keep manifest order)."""
    return tuple(sorted(tiers, key=lambda t: demand(t.floor), reverse=True))


@dataclass(frozen=True)
class HostPolicy:
    """Per-host policy from ``[hosts.NAME]``; declared capability keys cap detection."""

    name: str
    tiers: tuple[str, ...] | None = None  # None: every tier it qualifies for
    allow_models: tuple[str, ...] | None = None  # None: every model
    deny_models: tuple[str, ...] = ()
    declared: dict[str, Any] = field(default_factory=dict)  # FLEET_CAPABILITY keys
    pass_env: tuple[str, ...] = ()  # worker variables its jobs may see (names only)

    def allows_model(self, model: str | None) -> bool:
        if model is None:
            return True
        if model in self.deny_models:
            return False
        return self.allow_models is None or model in self.allow_models

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tiers": self.tiers and list(self.tiers),
            "allow_models": self.allow_models and list(self.allow_models),
            "deny_models": list(self.deny_models),
            "declared": self.declared,
            "pass_env": list(self.pass_env),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HostPolicy:
        tup = lambda v: None if v is None else tuple(v)  # noqa: E731
        return cls(
            d["name"],
            tup(d.get("tiers")),
            tup(d.get("allow_models")),
            tuple(d.get("deny_models") or ()),
            dict(d.get("declared") or {}),
            tuple(d.get("pass_env") or ()),
        )


@dataclass(frozen=True)
class JobSpec:
    """One training job, fully expanded (a sweep yields one JobSpec per point)."""

    name: str
    job_id: str
    model: str | None = None
    command: tuple[str, ...] | None = None
    artifacts: tuple[str, ...] = ()
    data: str | None = None
    hyper: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    priority: int = DEFAULT_PRIORITY
    needs: Needs = Needs()
    prefer_cuda: bool = False
    prefer_cuda_grace_s: float = PREFER_CUDA_GRACE_S
    allowed_hosts: tuple[str, ...] = ()
    denied_hosts: tuple[str, ...] = ()
    timeout_s: float | None = None
    max_attempts: int | None = None
    line: int | None = None  # where the job starts in its manifest, for messages
    # dir (relative to the job's work dir) synced to the store while it runs
    checkpoint: str | None = None
    # its code: a pinned store URI (manifest.dataref) copied in as its cwd
    workdir: str | None = None
    requirements: tuple[str, ...] = ()  # requirement lines of its own environment
    # sha256 of the workdir's pyproject.toml + uv.lock: `uv sync --frozen`
    env_lock: str | None = None
    python: str | None = None  # the environment's Python version, e.g. "3.12"
    env: dict[str, str] = field(default_factory=dict)  # plain variables set for the job
    # stopping it loses nothing: an urgent job may take its place (routing.preempt)
    preemptible: bool = False
    search: str | None = None  # a trial's search id (state.search); None for every other job
    trial: int | None = None  # a trial's number in its search
    owner: str | None = None  # who it belongs to, if its table says (else the publisher's --owner)
    nodes: int = 1  # hosts it spans (a gang, tasks.gang); its needs are per host
    # a pipeline's follower (manifest.pipeline): every upstream it starts after (after, inputs
    # and params_from together), the bundles it takes, the search whose best values it takes
    after: tuple[Upstream, ...] = ()
    inputs: tuple[Input, ...] = ()
    params_from: str | None = None  # the search's id

    @property
    def own_env(self) -> bool:
        """Whether the job runs in an environment of its own, not the worker's."""
        return bool(self.requirements) or self.env_lock is not None

    @property
    def gang(self) -> bool:
        """Whether it spans hosts: one member per host, started and stopped together."""
        return self.nodes > 1

    @property
    def kind(self) -> str:
        """The store folder for its artifacts: the model, or 'command'."""
        return self.model or "command"

    def to_dict(self) -> dict[str, Any]:
        # by hand, not asdict: asdict deep-copies every value, a second per 100,000 jobs
        d = {f: _plain(getattr(self, f)) for f in _JOB_FIELDS}
        d["command"] = list(self.command) if self.command else None
        # left out at its default: older workers read the spec, digests stay
        if not self.preemptible:
            del d["preemptible"]
        if self.search is None:
            del d["search"], d["trial"]
        if self.owner is None:
            del d["owner"]
        if self.nodes == 1:
            del d["nodes"]
        for k in ("after", "inputs", "params_from"):
            if not d[k]:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobSpec:
        d = dict(d)
        d["needs"] = Needs(**d.get("needs", {}))
        d["command"] = tuple(d["command"]) if d.get("command") else None
        for k in ("artifacts", "allowed_hosts", "denied_hosts", "requirements"):
            d[k] = tuple(d.get(k) or ())
        d["after"] = tuple(Upstream.from_dict(u) for u in d.get("after") or ())
        d["inputs"] = tuple(Input.from_dict(i) for i in d.get("inputs") or ())
        return cls(**d)


_JOB_FIELDS = tuple(f.name for f in fields(JobSpec))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """A spec value as JSON-ready data: tuples become lists, dataclasses dicts, dicts copies."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, (Needs, Upstream, Input)):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if is_dataclass(value):
        return {f: _plain(getattr(value, f)) for f in value.__dataclass_fields__}
    return value


@dataclass(frozen=True)
class Manifest:
    """A validated manifest: its tiers (most demanding first), host policies and jobs."""

    path: str
    tiers: tuple[TierSpec, ...]
    hosts: dict[str, HostPolicy]
    jobs: tuple[JobSpec, ...]
    # sha256 -> local bytes the jobs' data pins name; publish stages them in the store
    data_sources: dict[str, DataSource] = field(default_factory=dict)
    # manifest.search.SearchSpec: searches, whose trials are published as they run
    searches: tuple = ()
