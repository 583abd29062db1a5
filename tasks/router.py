"""Route a plain ``train.apply_async(job)`` the way `fleet publish` would (default tiers).

Only tier queues: a need or constraint queue exists for workers once publish records it
in Redis, which a plain ``apply_async`` does not, so such a job goes to the least
demanding tier that guarantees its needs, as before need queues.
"""

from __future__ import annotations

from core.constants import TASK_NAME
from manifest.schema import JobSpec
from routing.tiers import DEFAULT_TIERS, route, tier_for


def route_task(name, args, kwargs, options, task=None, **kw):
    if name != TASK_NAME or not args or "queue" in options:
        return None
    job = JobSpec.from_dict(args[0])
    r = route(job, DEFAULT_TIERS, {})
    if r is None:
        return None
    if r.constraint is not None and r.constraint.needs is not None:
        tier = tier_for(job.needs, DEFAULT_TIERS)
        return {"queue": tier.name if tier else r.tier}
    return {"queue": r.queue}
