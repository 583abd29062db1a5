"""Three of fleet's consuming policies, each a ``tasks.hooks.TransportHook`` (the fourth,
``LostPolls``, is in ``tasks.lostpolls``).

- ``PoisonCheck``: an entry the worker cannot use (``tasks.poison``) is set aside in the
  dead letters (``state.deadletter``) instead of raising in the event loop.
- ``FairShare``: a queue's lists in fair-share order (``tasks.fairorder``), and a restored
  message back to its owner's list.
- ``Admission``: only queues whose jobs would start now (``tasks.admission``), a wake-up
  when room frees, and the delivered job's resources reserved before Celery sees it.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import fields

import redis

from core import constants as C
from manifest.schema import Needs
from state import deadletter, jobrecord, queues
from tasks import admission, host, poison
from tasks.fairorder import FairOrder
from tasks.hooks import DELIVER, Delivery, TransportHook, Verdict

log = logging.getLogger("fleet.transport")
NEED_FIELDS = frozenset(f.name for f in fields(Needs))
Acquire = Callable[[], AbstractContextManager[redis.Redis]]


class PoisonCheck(TransportHook):
    """Decodes each delivery; a bad one is set aside, never handed to Celery."""

    def __init__(self, acquire: Acquire):
        self.acquire = acquire

    def before_deliver(self, delivery: Delivery) -> Verdict:
        task_queue = not poison.is_reply_queue(delivery.queue)
        message, why = poison.inspect(delivery.item, task_queue=task_queue)
        if why:
            self._set_aside(delivery, why)
            return Verdict(why)
        delivery.message = message
        return DELIVER

    def _set_aside(self, delivery: Delivery, why: str) -> None:
        ctx = host.current()  # built at worker start, before the consumer runs
        worker = ctx.settings.hostname if ctx is not None else socket.gethostname()
        record = deadletter.entry(delivery.item, why, delivery.queue, delivery.key, worker)
        try:
            with self.acquire() as client:
                deadletter.set_aside(client, record)
        except redis.RedisError as e:
            log.error(
                "poison entry on %s (%s) could not be set aside (%s); dropped: %.500s",
                delivery.key,
                why,
                e,
                record["entry"],
            )
            return
        log.error("poison entry on %s set aside in %s: %s", delivery.key, C.DEAD_LETTER_KEY, why)


class FairShare(TransportHook):
    """Owners least used per share first; kombu's plain lists (older publishers) before them."""

    def __init__(self, acquire: Acquire, order: FairOrder):
        self.acquire, self.order = acquire, order

    def lists(self, queue: str, keys: list[str]) -> list[str]:
        return self.order.keys(queue)

    def idle(self) -> None:
        self.order.expire()  # look for owners that appeared meanwhile

    def restore_key(self, payload: dict, queue: str, wire_pri: int) -> str | None:
        owner = self._owner_of(payload)
        return queues.owner_key(queue, owner, wire_pri) if owner else None

    def _owner_of(self, payload: dict) -> str | None:
        job_id = (payload.get("headers") or {}).get("id") if isinstance(payload, dict) else None
        if not job_id:
            return None
        with self.acquire() as client:
            rec = jobrecord.fetch(client, job_id, ("owner",))
        return rec.owner if rec and rec.owner else None


class Admission(TransportHook):
    """Consults the worker's installed gate (none installed: every hook a no-op)."""

    def __init__(self, gate: Callable[[], admission.Gate | None] = admission.installed):
        self.gate = gate

    def consumable(self, queues: list[str]) -> list[str]:
        gate = self.gate()
        return queues if gate is None else gate.consumable(queues)

    def polled(self, keys: list[str]) -> list[str]:
        gate = self.gate()
        if gate is None:
            return keys
        # room freed by preemption: only where its job waits (tasks.preemption); a release
        # pushes to the wake list, so a freed GPU is offered work at once
        return gate.held_lists(keys) + [gate.wake_key]

    def is_delivery(self, key: str) -> bool:
        gate = self.gate()
        return gate is None or key != gate.wake_key  # resources freed: BRPOP again on more

    def before_deliver(self, delivery: Delivery) -> Verdict:
        # a job that no longer fits (a race) is still delivered, never dropped: its execution
        # finds no reservation and hands it back to its queue (exactly once)
        gate = self.gate()
        if gate is not None and delivery.message and not poison.is_reply_queue(delivery.queue):
            reserve(gate, delivery.message, delivery.queue)
        return DELIVER

    def ended(self, tag: str) -> None:
        gate = self.gate()  # a delivery that ended gives back what it reserved
        if gate is not None:
            gate.release(tag)


def reserve(gate: admission.Gate, message: dict, queue: str) -> bool:
    """Reserve what the delivered job needs, before Celery sees it, so the next BRPOP asks
    only for what still fits (False: another delivery took the room meanwhile)."""
    try:
        job = poison.job_of(message)
        written = job.get("needs") or {}
        # only the fields this fleet knows: a newer publisher's extra ones do not block it
        needs = Needs(**{k: v for k, v in written.items() if k in NEED_FIELDS})
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # execution refuses it, loudly
        log.debug("delivery on %s: cannot read its needs (%s); taking it as one core", queue, e)
        needs, job = Needs(), {}
    tag = message["properties"]["delivery_tag"]
    return gate.take(tag, gate.demand(needs, queue), job.get("job_id", "")) is not None
