"""kombu's Redis transport, serving a worker's queues in order first and priority second,
surviving poison entries, and never acking away the only copy of a job that did not run.

Stock kombu asks Redis for every queue's priority-0 list, then every priority-1 list, and
so on, so an urgent CPU job would beat a routine cuda-large job on a big GPU host. fleet
wants the host to drain its most demanding tier first (the queue order the worker was
given), using message priority only within a queue. ``register()`` (called by the app
module) makes ``redis://`` and ``rediss://`` URLs select it, so the broker URL stays a plain
redis URL everywhere it is shown or parsed (worker banner, Flower's Broker page).

Every override of kombu's private methods lives in ``tasks.kombu_seam``, which calls the
channel's hooks (``tasks.hooks``) directly; this module only says which hooks, in which
order (``fleet_hooks``: lost polls, poison checks, fair share, admission), for every
Channel variant (plain Redis, Sentinel). ``sentinel://`` URLs select ``SentinelTransport``
(master from FLEET_SENTINEL_MASTER, see state.broker), so queue order and poison handling
hold there too.

Fair share: within each queue the worker asks for kombu's own lists (messages from an older
publisher) first, then each owner's lists (state.queues) in fair-share order
(tasks.fairorder): least used per share first, priority still ordering each owner's own.
A message kombu gives back (a stopping worker's prefetched ones, a rejected delivery) goes
back to its owner's list.
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from tasks import kombu_seam as seam
from tasks.deliveryhooks import Admission, FairShare, PoisonCheck
from tasks.fairorder import FairOrder
from tasks.hooks import Hooks
from tasks.lostpolls import LostPolls, LostQueues

LOST = LostQueues()  # one per worker process: a lost poll's note outlives its channel


def fleet_hooks(channel: seam.SeamChannelMixin) -> Hooks:
    """fleet's consuming hooks for one channel, in the order they run."""
    acquire = channel.conn_or_acquire
    fair = FairShare(acquire, FairOrder(acquire, channel.priority_steps))
    return Hooks([LostPolls(acquire, LOST), PoisonCheck(acquire), fair, Admission()])


class Channel(seam.SeamChannelMixin, seam.RedisChannel):
    make_hooks = staticmethod(fleet_hooks)


class Transport(seam.RedisTransport):
    Channel = Channel


class SentinelChannel(seam.SeamSentinelChannelMixin, seam.SentinelChannel):
    """sentinel://: the master is asked of the sentinels on every (re)connection."""

    make_hooks = staticmethod(fleet_hooks)


class SentinelTransport(seam.SentinelTransport):
    Channel = SentinelChannel


def register() -> None:
    """Serve redis://, rediss:// and sentinel:// broker URLs with fleet's transports."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
    TRANSPORT_ALIASES["sentinel"] = f"{__name__}:SentinelTransport"
