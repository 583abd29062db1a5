"""``routing.route`` once per distinct routing input, not once per job.

The points of a sweep differ only in name, ID, hyper and seed, none of which routing
reads, so a 100,000-point sweep routes once. Every other JobSpec field is part of the
key, so a field added later is never silently left out of it.
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter

from manifest.schema import JobSpec, Manifest
from routing import tiers as routing

# fields routing does not read: those that vary between a sweep's points, and the job's code
# and environment
NOT_ROUTED = frozenset(
    {
        "name",
        "job_id",
        "hyper",
        "seed",
        "line",
        "workdir",
        "requirements",
        "env_lock",
        "python",
        "env",
    }
)
KEY_FIELDS = tuple(f.name for f in fields(JobSpec) if f.name not in NOT_ROUTED)
_key = attrgetter(*KEY_FIELDS)


class RouteCache:
    """Callable: job -> its ``routing.Route`` (None when no tier guarantees its needs)."""

    def __init__(self, manifest: Manifest):
        self.tiers, self.hosts = manifest.tiers, manifest.hosts
        self._routes: dict[tuple, routing.Route | None] = {}

    def __call__(self, job: JobSpec) -> routing.Route | None:
        key = _key(job)
        try:
            return self._routes[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable field: route it directly
            return routing.route(job, self.tiers, self.hosts)
        r = self._routes[key] = routing.route(job, self.tiers, self.hosts)
        return r
