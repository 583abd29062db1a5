"""Route a plain ``train.apply_async(job)`` the way `fleet publish` would (default tiers)."""
from __future__ import annotations

from fleet.constants import TASK_NAME
from manifest.schema import JobSpec
from routing.tiers import DEFAULT_TIERS, route


def route_task(name, args, kwargs, options, task=None, **kw):
    if name != TASK_NAME or not args or "queue" in options:
        return None
    r = route(JobSpec.from_dict(args[0]), DEFAULT_TIERS, {})
    return {"queue": r.queue} if r else None
