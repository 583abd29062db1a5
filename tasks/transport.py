"""kombu's Redis transport, serving a worker's queues in order first and priority second,
surviving poison entries, and never acking away the only copy of a job that did not run.

Stock kombu asks Redis for every queue's priority-0 list, then every priority-1 list, and
so on, so an urgent CPU job would beat a routine cuda-large job on a big GPU host. fleet
wants the host to drain its most demanding tier first (the queue order the worker was
given), using message priority only within a queue. ``register()`` (called by the app
module) makes ``redis://`` and ``rediss://`` URLs select it, so the broker URL stays a plain
redis URL everywhere it is shown or parsed (worker banner, Flower's Broker page).

The fleet behaviour lives in ``FleetChannelMixin`` so every Channel variant (plain Redis,
Sentinel) shares it; ``sentinel://`` URLs select ``SentinelTransport`` (master from
FLEET_SENTINEL_MASTER, see state.broker), so queue order and poison handling hold there too.

Fair share: within each queue the worker asks for kombu's own lists (messages from an older
publisher) first, then each owner's lists (state.queues) in fair-share order
(tasks.fairorder): least used per share first, priority still ordering each owner's own.
A message kombu gives back (a stopping worker's prefetched ones, a rejected delivery) goes
back to its owner's list.
"""
from __future__ import annotations

import logging
import socket
from dataclasses import fields
from importlib import resources

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps as kombu_json

from core import constants as C
from manifest.schema import Needs
from state import deadletter, queues
from tasks import admission, host, poison
from tasks.fairorder import FairOrder

log = logging.getLogger("fleet.transport")
NEED_FIELDS = frozenset(f.name for f in fields(Needs))
_ACK_LUA = resources.files("state").joinpath("lua/ack.lua").read_text()


class FleetQoS(kombu_redis.QoS):
    def ack(self, delivery_tag):
        # one script instead of kombu's ZREM+HDEL: a delivery of a job that never ran keeps
        # its unacked entry, so the reaper gives the job back (state/lua/ack.lua)
        with self.channel.conn_or_acquire() as client:
            done = client.eval(_ACK_LUA, 2, self.unacked_key, self.unacked_index_key, delivery_tag, C.JOB_KEY)
        if bytes_to_str(done) == "kept":
            log.warning("delivery %s was acked but its job never ran; the reaper gives it back "
                        "within two lease TTLs", delivery_tag)
        super(kombu_redis.QoS, self).ack(delivery_tag)
        _release(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        super().reject(delivery_tag, requeue=requeue)
        _release(delivery_tag)


def _release(delivery_tag) -> None:
    """A delivery that ended gives back what it reserved (a no-op once its run did)."""
    gate = admission.installed()
    if gate is not None:
        gate.release(bytes_to_str(delivery_tag))


class FleetChannelMixin:
    """Queue-major BRPOP, poison entries set aside, and the stranding-safe ack."""

    QoS = FleetQoS
    _fair: FairOrder | None = None

    def _fair_order(self) -> FairOrder:
        if self._fair is None:
            self._fair = FairOrder(self.conn_or_acquire, self.priority_steps)
        return self._fair

    def _brpop_start(self, timeout=None):
        # kombu's own method with the two loops swapped: queue-major instead of priority-major
        if timeout is None:
            timeout = self.brpop_timeout
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        gate = admission.installed()
        wake = []
        if gate is not None:
            # only queues whose jobs would start now; a release pushes to the wake list,
            # so a freed GPU is offered work at once instead of at the next timeout
            queues, wake = gate.consumable(queues), [gate.wake_key]
        fair = self._fair_order()
        keys = [key for queue in queues for key in fair.keys(queue)]
        if gate is not None:   # room freed by preemption: only where its job waits (tasks.preemption)
            keys = gate.held_lists(keys)
        keys += wake + [timeout or 0]
        self._in_poll = self.client.connection
        self._brpop_sent_at = kombu_redis.monotonic()
        command_args = ["BRPOP", *keys]
        if self.global_keyprefix:
            command_args = self.client._prefix_args(command_args)
        self.client.connection.send_packed_command(self._packed(command_args))

    _last_brpop: tuple[list, object] = ([], None)

    def _packed(self, command_args: list):
        # packing a long key list (many owners waiting) costs more than Redis's BRPOP itself,
        # and polls between two fair-share refreshes send the very same one
        args, packed = self._last_brpop
        if args != command_args:
            packed = self.client.connection.pack_command(*command_args)
            self._last_brpop = (command_args, packed)
        return packed

    def _brpop_read(self, **options):
        # kombu's own method, except that an entry the worker cannot use is set aside
        # (state.deadletter) instead of raising in the event loop and ending the worker
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            if not dest__item:
                self._fair_order().expire()    # idle: look for owners that appeared meanwhile
                raise kombu_redis.Empty()
            key, item = dest__item
            key = bytes_to_str(key)
            gate = admission.installed()
            if gate is not None and key == gate.wake_key:
                raise kombu_redis.Empty()     # resources were freed: BRPOP again on more queues
            dest = queues.queue_of(key)
            self._queue_cycle.rotate(dest)
            message, why = poison.inspect(item, task_queue=not poison.is_reply_queue(dest))
            if why:
                self._set_aside(item, why, dest, key)
                raise kombu_redis.Empty()
            if gate is not None and not poison.is_reply_queue(dest):
                # a job that no longer fits (a race) is still delivered, never dropped: its
                # execution finds no reservation and hands it back to its queue (exactly once)
                self._reserve(gate, message, dest)
            self.connection._deliver(message, dest)
            return True
        finally:
            self._in_poll = None
            flush = getattr(self, "_flush_brpop_reauth", None)   # kombu >= 5.6
            if flush:
                flush()

    def _get(self, queue):
        # basic_get (kombu's polling path): the same lists and order as BRPOP
        with self.conn_or_acquire() as client:
            for key in self._fair_order().keys(queue):
                item = client.rpop(key)
                if item:
                    return kombu_redis.loads(bytes_to_str(item))
        raise kombu_redis.Empty()

    def _all_lists(self, client, queue: str) -> list[str]:
        return queues.keys_of(queue, queues.registered(client).get(queue, ()), self.priority_steps)

    def _size(self, queue):
        # queue_declare's message count: every owner's lists too
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for key in self._all_lists(client, queue):
                pipe.llen(key)
            return sum(pipe.execute())

    def _purge(self, queue):
        # `celery purge`: every owner's lists too
        with self.conn_or_acquire() as client:
            with client.pipeline() as pipe:
                for key in self._all_lists(client, queue):
                    pipe.llen(key).delete(key)
                return sum(pipe.execute()[::2])

    def _do_restore_message(self, payload, exchange, routing_key, pipe, leftmost=False):
        # kombu's own, except that a fleet job's message goes back to its owner's list (and
        # registers it, in the same transaction as kombu's removal from its unacked hash)
        owner = self._owner_of(payload)   # a Redis error aborts kombu's transaction: nothing lost
        if not owner:
            return super()._do_restore_message(payload, exchange, routing_key, pipe, leftmost)
        try:
            payload["headers"]["redelivered"] = True
            payload["properties"]["delivery_info"]["redelivered"] = True
        except KeyError:
            pass
        for queue in self._lookup(exchange, routing_key):
            pri = self._get_message_priority(payload, reverse=False)
            queues.push_in(pipe, queues.owner_key(queue, owner, pri), kombu_json(payload), leftmost)

    def _owner_of(self, payload: dict) -> str | None:
        job_id = (payload.get("headers") or {}).get("id") if isinstance(payload, dict) else None
        if not job_id:
            return None
        with self.conn_or_acquire() as client:
            owner = client.hget(C.JOB_KEY + job_id, "owner")
        return bytes_to_str(owner) if owner else None

    def _reserve(self, gate: admission.Gate, message: dict, queue: str) -> bool:
        """Reserve what the delivered job needs, before Celery sees it, so the next BRPOP
        asks only for what still fits (False: another delivery took the room meanwhile)."""
        try:
            job = poison.job_of(message)
            written = job.get("needs") or {}
            # only the fields this fleet knows: a newer publisher's extra ones do not block it
            needs = Needs(**{k: v for k, v in written.items() if k in NEED_FIELDS})
        except (KeyError, TypeError, ValueError, AttributeError) as e:   # execution refuses it, loudly
            log.debug("delivery on %s: cannot read its needs (%s); taking it as one core", queue, e)
            needs, job = Needs(), {}
        tag = message["properties"]["delivery_tag"]
        return gate.take(tag, gate.demand(needs, queue), job.get("job_id", "")) is not None

    def _set_aside(self, item, why: str, queue: str, key: str) -> None:
        ctx = host.current()   # built at worker start, before the consumer runs
        worker = ctx.settings.hostname if ctx is not None else socket.gethostname()
        record = deadletter.entry(item, why, queue, key, worker)
        try:
            with self.conn_or_acquire() as client:
                deadletter.set_aside(client, record)
        except redis.RedisError as e:
            log.error("poison entry on %s (%s) could not be set aside (%s); dropped: %.500s",
                      key, why, e, record["entry"])
            return
        log.error("poison entry on %s set aside in %s: %s", key, C.DEAD_LETTER_KEY, why)


class Channel(FleetChannelMixin, kombu_redis.Channel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(FleetChannelMixin, kombu_redis.SentinelChannel):
    """sentinel://: the master is asked of the sentinels on every (re)connection."""


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def register() -> None:
    """Serve redis://, rediss:// and sentinel:// broker URLs with fleet's transports."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
    TRANSPORT_ALIASES["sentinel"] = f"{__name__}:SentinelTransport"
