"""What the loader asks of the layers above it, passed in: pin a job's data, route a job.

Pinning hashes files and asks S3 (``artifacts.identity.DataResolver``); routing is
``routing``'s decision. The manifest package knows neither: the operator's loader
(``fleet.manifests``) hands both in, so what a manifest is stays pure and testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from manifest.dataref import DataSource, PinnedWorkdir
from manifest.schema import HostPolicy, JobSpec, TierSpec


class DataPinner(Protocol):
    """Pins each data entry a manifest names to its content."""

    @property
    def sources(self) -> dict[str, DataSource]:
        """sha256 -> the local bytes a pin named, which publish stages in the store."""
        ...

    def pin(self, written: str, base_dir: Path) -> str:
        """The pinned URI of ``written`` (a path relative to ``base_dir``, or s3://);
        raises ``core.errors.DataProblem`` when it cannot be pinned."""
        ...

    def pin_workdir(
        self, written: str, base_dir: Path, requirements_file: str | None
    ) -> PinnedWorkdir:
        """The workdir ``written`` (relative to ``base_dir``) pinned to the files that travel,
        with ``requirements_file`` (a path inside it) read; raises ``DataProblem``."""
        ...


class Unpinned:
    """Keeps data as written: job IDs then name the path, not the bytes. For reading a
    manifest's shape only; publishing needs real pins."""

    @property
    def sources(self) -> dict[str, DataSource]:
        return {}

    def pin(self, written: str, base_dir: Path) -> str:
        return written

    def pin_workdir(
        self, written: str, base_dir: Path, requirements_file: str | None
    ) -> PinnedWorkdir:
        return PinnedWorkdir(written, () if requirements_file else None)


@dataclass(frozen=True)
class Routes:
    """What a job's routing check needs; ``defaults`` when no [tiers] table was written."""

    tiers: tuple[TierSpec, ...]
    hosts: dict[str, HostPolicy]
    defaults: bool


@dataclass(frozen=True)
class JobProblem:
    """A problem a check outside this package found in one job: at ``key`` of its table,
    or at the table itself when ``key`` is None."""

    message: str
    fix: str
    key: str | None = None


class RouteCheck(Protocol):
    """Whether a job (its needs, hosts and model: no ID yet) can be routed anywhere."""

    def __call__(self, job: JobSpec, routes: Routes) -> list[JobProblem]: ...
