"""Plain hooks around the worker's transport: each consuming policy is one small class.

dramatiq's middleware is the model: a policy overrides only the hooks it needs, and the
kombu seam (``tasks.kombu_seam``) calls ``Hooks`` directly, nothing in between. fleet's
policies are ``PoisonCheck``, ``FairShare`` and ``Admission`` (``tasks.deliveryhooks``, on
``tasks.poison``, ``tasks.fairorder`` and ``tasks.admission``) and ``LostPolls``
(``tasks.lostpolls``); ``tasks.transport`` puts them in order. No hook knows kombu: a
hook sees queue names, list keys, decoded messages and Redis clients, and imports nothing
of kombu (tests/unit/test_transport_hooks.py checks the imports).

One BRPOP: ``before_poll`` first, then ``consumable`` narrows the worker's queues (in its
order), ``lists`` gives each queue's lists in serving order, ``polled`` edits the whole key
list; ``poll_lost``: the BRPOP failed with its reply maybe lost. One popped entry:
``is_delivery`` (False: a wake-up, not a message), then ``before_deliver`` in hook order,
the first verdict that does not deliver winning. ``ended``: a delivery was acked or
rejected. ``restore_key``: the list a message kombu gives back goes to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Delivery:
    """An entry popped from ``key`` (a list of ``queue``); ``message`` once decoded."""

    key: str
    queue: str
    item: bytes
    message: dict | None = None


@dataclass(frozen=True)
class Verdict:
    """What a hook says of a delivery: hand it to Celery, or not (``why``)."""

    why: str = ""

    @property
    def delivers(self) -> bool:
        return not self.why


DELIVER = Verdict()


class TransportHook:
    """Every hook, each a no-op: a policy overrides the ones it needs."""

    def before_poll(self) -> None:
        return None

    def consumable(self, queues: list[str]) -> list[str]:
        return queues

    def lists(self, queue: str, keys: list[str]) -> list[str]:
        return keys

    def polled(self, keys: list[str]) -> list[str]:
        return keys

    def is_delivery(self, key: str) -> bool:
        return True

    def before_deliver(self, delivery: Delivery) -> Verdict:
        return DELIVER

    def restore_key(self, payload: dict, queue: str, wire_pri: int) -> str | None:
        return None

    def idle(self) -> None:
        return None

    def poll_lost(self, keys: list[str]) -> None:
        return None

    def ended(self, tag: str) -> None:
        return None


class Hooks:
    """Runs ``hooks`` in order."""

    def __init__(self, hooks: Sequence[TransportHook]):
        self.hooks = tuple(hooks)

    def poll_keys(self, queues: list[str], plain: Callable[[str], list[str]]) -> list[str]:
        """The lists one BRPOP asks for; ``plain(queue)``: kombu's lists of ``queue``."""
        for hook in self.hooks:
            hook.before_poll()
        for hook in self.hooks:
            queues = hook.consumable(queues)
        keys = [key for queue in queues for key in self.lists(queue, plain(queue))]
        for hook in self.hooks:
            keys = hook.polled(keys)
        return keys

    def lists(self, queue: str, keys: list[str]) -> list[str]:
        for hook in self.hooks:
            keys = hook.lists(queue, keys)
        return keys

    def is_delivery(self, key: str) -> bool:
        return all(hook.is_delivery(key) for hook in self.hooks)

    def before_deliver(self, delivery: Delivery) -> Verdict:
        for hook in self.hooks:
            verdict = hook.before_deliver(delivery)
            if not verdict.delivers:
                return verdict
        return DELIVER

    def restore_key(self, payload: dict, queue: str, wire_pri: int) -> str | None:
        return next((k for h in self.hooks if (k := h.restore_key(payload, queue, wire_pri))), None)

    def idle(self) -> None:
        for hook in self.hooks:
            hook.idle()

    def poll_lost(self, keys: list[str]) -> None:
        """A BRPOP on ``keys`` failed with a connection error: Redis may have popped an entry
        whose reply never arrived (kombu: lost, it is not in ``unacked`` yet)."""
        for hook in self.hooks:
            hook.poll_lost(keys)

    def ended(self, tag: str) -> None:
        for hook in self.hooks:
            hook.ended(tag)
