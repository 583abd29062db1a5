"""Whether a job can go anywhere: the routing check a manifest load runs on each job.

A job no tier guarantees (a CUDA job with no CUDA tier), or one every allowed host refuses,
is a manifest problem with a fix, not a message that waits forever. Pure: ``route_problems``
is the ``manifest.hooks.RouteCheck`` the operator's loader passes in.
"""

from __future__ import annotations

from manifest.hooks import JobProblem, Routes
from manifest.schema import DEFAULT_TIERS, JobSpec, Needs
from routing.tiers import route


def route_problems(job: JobSpec, routes: Routes) -> list[JobProblem]:
    """A job no tier guarantees, or one no host may run; empty when it routes."""
    r = route(job, routes.tiers, routes.hosts)
    if r is None:
        return [
            JobProblem(
                f"job {job.name!r} needs {describe(job.needs)} and no tier guarantees it",
                _unroutable_fix(job.needs, routes.defaults),
            )
        ]
    if set(job.allowed_hosts) & set(job.denied_hosts):
        return []  # reported by the manifest as hosts both allowed and denied
    if any(
        c and c.allowed is not None and not (c.allowed - c.denied)
        for c in (r.constraint, r.fallback_constraint)
    ):
        return [
            JobProblem(
                f"job {job.name!r} can run on no host: every allowed host is denied "
                "(by denied_hosts or a host's model policy)",
                "allow a host that accepts it",
                key="allowed_hosts",
            )
        ]
    return []


def describe(needs: Needs, toml: bool = False) -> str:
    """``CUDA, min_vram_gib=80``, or as TOML lines to write (``require_cuda = true, ...``)."""
    parts = []
    if needs.require_cuda:
        parts.append("require_cuda = true" if toml else "CUDA")
    for key in ("min_vram_gib", "min_ram_gib", "min_cores"):
        if getattr(needs, key):
            parts.append(
                f"{key} = {getattr(needs, key):g}" if toml else f"{key}={getattr(needs, key):g}"
            )
    return ", ".join(parts) or "nothing"


def _unroutable_fix(needs: Needs, defaults: bool) -> str:
    # adding one [tiers.X] to a manifest without [tiers] drops every default tier
    note = ""
    if defaults:
        names = [t.name for t in DEFAULT_TIERS]
        note = (
            " (a [tiers] table replaces the default tiers: copy "
            f"{', '.join(names[:-1])} and {names[-1]} into it too)"
        )
    tier = ("cuda" if needs.require_cuda else "cpu") + "-big"
    return (
        f"add a tier whose floor covers it, e.g. [tiers.{tier}] with "
        f"{describe(needs, toml=True)}{note}, or lower the job's needs"
    )
