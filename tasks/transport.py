"""kombu's Redis transport, serving a worker's queues in order first and priority second,
surviving poison entries, and never acking away the only copy of a job that did not run.

Stock kombu asks Redis for every queue's priority-0 list, then every priority-1 list, and
so on, so an urgent CPU job would beat a routine cuda-large job on a big GPU host. fleet
wants the host to drain its most demanding tier first (the queue order the worker was
given), using message priority only within a queue. ``register()`` (called by the app
module) makes ``redis://`` and ``rediss://`` URLs select it, so the broker URL stays a plain
redis URL everywhere it is shown or parsed (worker banner, Flower's Broker page).

Every override of kombu's private methods lives in ``tasks.kombu_seam``; this module only
fills in the seam's plain methods by calling the consuming hooks (``tasks.hooks``: poison
checks, fair share, admission, in ``tasks.deliveryhooks``). ``FleetChannelMixin`` does
that for every Channel variant (plain Redis, Sentinel); ``sentinel://`` URLs select
``SentinelTransport`` (master from FLEET_SENTINEL_MASTER, see state.broker), so queue order
and poison handling hold there too.

Fair share: within each queue the worker asks for kombu's own lists (messages from an older
publisher) first, then each owner's lists (state.queues) in fair-share order
(tasks.fairorder): least used per share first, priority still ordering each owner's own.
A message kombu gives back (a stopping worker's prefetched ones, a rejected delivery) goes
back to its owner's list.
"""

from __future__ import annotations

import logging
from importlib import resources

from kombu.transport import TRANSPORT_ALIASES
from kombu.utils.encoding import bytes_to_str

from core import constants as C
from state import queues
from state.jobrecord import JOB_KEY_PREFIX
from tasks import kombu_seam as seam
from tasks.deliveryhooks import Admission, FairShare, PoisonCheck
from tasks.fairorder import FairOrder
from tasks.hooks import Delivery, Hooks
from tasks.lostpolls import LOST

log = logging.getLogger("fleet.transport")
_ACK_LUA = resources.files("state").joinpath("lua/ack.lua").read_text()


class FleetChannelMixin:
    """The seam's plain methods, each one call into the consuming hooks."""

    _hooks: Hooks | None = None

    @property
    def hooks(self) -> Hooks:
        if self._hooks is None:
            acquire = self.conn_or_acquire
            fair = FairShare(acquire, FairOrder(acquire, self.priority_steps))
            self._hooks = Hooks([PoisonCheck(acquire), fair, Admission()])
        return self._hooks

    def poll_keys(self, names: list[str]) -> list[str]:
        LOST.report(self.conn_or_acquire)  # a poll of this process lost its reply: say so
        return self.hooks.poll_keys(names, self._plain_lists)

    def poll_lost(self, keys: list[str]) -> None:
        LOST.add(queues.queue_of(k) for k in keys if not k.startswith(C.WAKE_KEY))

    _plain: dict[str, list[str]] | None = None

    def _plain_lists(self, queue: str) -> list[str]:
        # kombu's own lists of a queue, asked on every poll: built once
        if self._plain is None:
            self._plain = {}
        got = self._plain.get(queue)
        if got is None:
            got = self._plain[queue] = queues.keys_of(queue, (), self.priority_steps)
        return got

    def lists(self, queue: str) -> list[str]:
        return self.hooks.lists(queue, self._plain_lists(queue))

    def receive(self, key: str, item: bytes) -> tuple[dict | None, str | None]:
        if not self.hooks.is_delivery(key):
            return None, None
        delivery = Delivery(key, queues.queue_of(key), item)
        verdict = self.hooks.before_deliver(delivery)
        return (delivery.message if verdict.delivers else None), delivery.queue

    def idle(self) -> None:
        self.hooks.idle()

    def all_lists(self, client, queue: str) -> list[str]:
        # queue_declare's message count and `celery purge`: every owner's lists too
        return queues.keys_of(queue, queues.registered(client).get(queue, ()), self.priority_steps)

    def restore_key(self, payload: dict, queue: str, wire_pri: int) -> str | None:
        return self.hooks.restore_key(payload, queue, wire_pri)

    def push_restored(self, pipe, key: str, message: str, leftmost: bool) -> None:
        queues.push_in(pipe, key, message, leftmost)  # registers an owner's list too

    def ack_entry(self, client, unacked_key: str, index_key: str, tag) -> None:
        # one script instead of kombu's ZREM+HDEL: a delivery of a job that never ran keeps
        # its unacked entry, so the reaper gives the job back (state/lua/ack.lua)
        done = client.eval(_ACK_LUA, 2, unacked_key, index_key, tag, JOB_KEY_PREFIX)
        if bytes_to_str(done) == "kept":
            log.warning(
                "delivery %s was acked but its job never ran; the reaper gives it back "
                "within two lease TTLs",
                tag,
            )

    def ended(self, tag: str) -> None:
        self.hooks.ended(tag)


class Channel(FleetChannelMixin, seam.SeamChannelMixin, seam.RedisChannel):
    pass


class Transport(seam.RedisTransport):
    Channel = Channel


class SentinelChannel(FleetChannelMixin, seam.SeamChannelMixin, seam.SentinelChannel):
    """sentinel://: the master is asked of the sentinels on every (re)connection."""


class SentinelTransport(seam.SentinelTransport):
    Channel = SentinelChannel


def register() -> None:
    """Serve redis://, rediss:// and sentinel:// broker URLs with fleet's transports."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
    TRANSPORT_ALIASES["sentinel"] = f"{__name__}:SentinelTransport"
