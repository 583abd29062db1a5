"""The one place fleet reaches into kombu's Redis transport (its private methods).

fleet changes five things about how kombu's Redis channel consumes: which lists a BRPOP
asks for (queue order, fair share, admission), what happens to a popped entry before
Celery sees it (poison, reservation), where a restored message goes back (its owner's
list), what an ack removes (state/lua/ack.lua), and who hears of a BRPOP whose reply was
lost. Each override below is kombu's own method with its one change: a call to the
channel's ``hooks`` (``tasks.hooks.Hooks``, which the channel class's ``make_hooks``
builds; ``tasks.transport`` gives fleet's), or, for the lists themselves, to
``state.queues`` and the ack script.

Every kombu private this module overrides or calls is listed in ``TOUCHED``; the pin test
(tests/unit/test_kombu_seam.py) holds a hash of each one's source for the kombu version
pyproject pins, so a kombu upgrade that changes any of them fails there by name.

A connection reset can close the kombu connection under a channel that still holds
unacked messages; kombu 5.7 then fails in ``_connparams`` with "'NoneType' object has no
attribute 'hostname'" (its transport's ``client`` is gone) while it closes the channel or
restores those messages, and the worker exits. ``_connparams`` here keeps the last good
parameters, so the restore still reaches Redis and the reset stays a reconnect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps as kombu_json

from state import queues, scripts
from state.jobrecord import JOB_KEY_PREFIX
from tasks.hooks import Delivery, Hooks

log = logging.getLogger("fleet.transport")

# kombu privates overridden (o) or called (c) here: re-read each one when the pin test fails
TOUCHED = (
    "kombu.transport.redis:Channel._brpop_start",  # o: which lists, in which order
    "kombu.transport.redis:Channel._brpop_read",  # o: a popped entry, before Celery
    "kombu.transport.redis:Channel._get",  # o: basic_get, the same lists
    "kombu.transport.redis:Channel._size",  # o: every owner's lists counted
    "kombu.transport.redis:Channel._purge",  # o: every owner's lists purged
    "kombu.transport.redis:Channel._do_restore_message",  # o: back to its owner's list
    "kombu.transport.redis:Channel._connparams",  # o: survives a closed connection
    "kombu.transport.redis:SentinelChannel._sentinel_managed_pool",  # o: the same, sentinels
    "kombu.transport.redis:Channel._q_for_pri",  # c: kombu's list names
    "kombu.transport.redis:Channel._get_message_priority",  # c
    "kombu.transport.redis:Channel._restore",  # c: calls _do_restore_message
    "kombu.transport.redis:QoS.ack",  # o: skipped for state/lua/ack.lua
    "kombu.transport.redis:QoS.reject",  # c
    "kombu.transport.redis:PrefixedStrictRedis._prefix_args",  # c
    "kombu.transport.virtual.base:Channel._lookup",  # c
    "kombu.transport.virtual.base:Transport._deliver",  # c: hands a message to Celery
    "kombu.transport.redis:Channel._flush_brpop_reauth",  # c
    "kombu.transport.redis:Channel.close",  # the reset path _connparams guards
    "kombu.transport.redis:QoS.restore_unacked",  # the reset path _connparams guards
    "kombu.utils.scheduling:round_robin_cycle.consume",  # c: _queue_cycle
    "kombu.utils.scheduling:priority_cycle.rotate",  # c: _queue_cycle (celeryconfig's)
)

Empty = kombu_redis.Empty


class SeamQoS(kombu_redis.QoS):
    def ack(self, delivery_tag):
        # kombu's ZREM+HDEL replaced by one script: a delivery of a job that never ran keeps
        # its unacked entry, so the reaper gives the job back (state/lua/ack.lua)
        with self.channel.conn_or_acquire() as client:
            ack = scripts.script(client, "ack")
            done = ack(
                keys=[self.unacked_key, self.unacked_index_key],
                args=[delivery_tag, JOB_KEY_PREFIX],
            )
        if bytes_to_str(done) == "kept":
            log.warning(
                "delivery %s was acked but its job never ran; the reaper gives it back "
                "within two lease TTLs",
                bytes_to_str(delivery_tag),
            )
        super(kombu_redis.QoS, self).ack(delivery_tag)
        self.channel.hooks.ended(bytes_to_str(delivery_tag))

    def reject(self, delivery_tag, requeue=False):
        super().reject(delivery_tag, requeue=requeue)
        self.channel.hooks.ended(bytes_to_str(delivery_tag))


class SeamChannelMixin:
    """kombu's private methods, each calling the channel's hooks where fleet changes it."""

    QoS = SeamQoS
    make_hooks: Callable[[SeamChannelMixin], Hooks] = staticmethod(lambda channel: Hooks([]))
    _hooks: Hooks | None = None
    _plain: dict[str, list[str]] | None = None
    _last_brpop: tuple[list, object] = ([], None)
    _last_connparams: dict[bool, dict] = {}

    @property
    def hooks(self) -> Hooks:
        if self._hooks is None:
            self._hooks = self.make_hooks(self)
        return self._hooks

    def _plain_lists(self, queue: str) -> list[str]:
        # kombu's own lists of a queue, asked on every poll: built once
        if self._plain is None:
            self._plain = {}
        got = self._plain.get(queue)
        if got is None:
            got = self._plain[queue] = queues.keys_of(queue, (), self.priority_steps)
        return got

    def _every_list(self, client, queue: str) -> list[str]:
        # queue_declare's message count and `celery purge`: every owner's lists too
        return queues.keys_of(queue, queues.registered(client).get(queue, ()), self.priority_steps)

    def _popped(self, key: str, item: bytes) -> tuple[dict | None, str | None]:
        """(message, queue) of an entry popped from ``key``: no message, nothing to hand to
        Celery; no queue, the entry was no queue's (e.g. a wake-up)."""
        if not self.hooks.is_delivery(key):
            return None, None
        delivery = Delivery(key, queues.queue_of(key), item)
        if not self.hooks.before_deliver(delivery).delivers:
            return None, delivery.queue
        if delivery.message is None:  # no hook decoded it: kombu's own decoding
            delivery.message = kombu_redis.loads(bytes_to_str(item))
        return delivery.message, delivery.queue

    # -- kombu's privates --

    def _brpop_start(self, timeout=None):
        # kombu's own, with the key list from the hooks (kombu: every queue's priority 0, ...)
        if timeout is None:
            timeout = self.brpop_timeout
        names = self._queue_cycle.consume(len(self.active_queues))
        if not names:
            return
        keys = self.hooks.poll_keys(list(names), self._plain_lists) + [timeout or 0]
        self._in_poll = self.client.connection
        self._brpop_sent_at = kombu_redis.monotonic()
        command_args = ["BRPOP", *keys]
        if self.global_keyprefix:
            command_args = self.client._prefix_args(command_args)
        self.client.connection.send_packed_command(self._packed(command_args))

    def _packed(self, command_args: list):
        # packing a long key list (many owners waiting) costs more than Redis's BRPOP itself,
        # and polls between two fair-share refreshes send the very same one
        args, packed = self._last_brpop
        if args != command_args:
            packed = self.client.connection.pack_command(*command_args)
            self._last_brpop = (command_args, packed)
        return packed

    def _brpop_read(self, **options):
        # kombu's own, with the popped entry going through the hooks (None: poll again)
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                self.hooks.poll_lost(self._last_brpop[0][1:-1])
                raise
            if not dest__item:
                self.hooks.idle()
                raise Empty()
            key, item = dest__item
            message, dest = self._popped(bytes_to_str(key), item)
            if dest is not None:
                self._queue_cycle.rotate(dest)
            if message is None:
                raise Empty()
            self.connection._deliver(message, dest)
            return True
        finally:
            self._in_poll = None
            flush = getattr(self, "_flush_brpop_reauth", None)  # kombu >= 5.6
            if flush:
                flush()

    def _get(self, queue):
        # basic_get (kombu's polling path): the same lists and order as BRPOP
        with self.conn_or_acquire() as client:
            for key in self.hooks.lists(queue, self._plain_lists(queue)):
                item = client.rpop(key)
                if item:
                    return kombu_redis.loads(bytes_to_str(item))
        raise Empty()

    def _size(self, queue):
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for key in self._every_list(client, queue):
                pipe.llen(key)
            return sum(pipe.execute())

    def _purge(self, queue):
        with self.conn_or_acquire() as client:
            with client.pipeline() as pipe:
                for key in self._every_list(client, queue):
                    pipe.llen(key).delete(key)
                return sum(pipe.execute()[::2])

    def _do_restore_message(self, payload, exchange, routing_key, pipe, leftmost=False):
        # kombu's own, except that a hook may name the list (in kombu's transaction; a Redis
        # error in restore_key aborts it: nothing lost)
        pri = self._get_message_priority(payload, reverse=False)
        routed = self._lookup(exchange, routing_key)
        targets = [(q, self.hooks.restore_key(payload, q, pri)) for q in routed]
        if not any(key for _, key in targets):
            return super()._do_restore_message(payload, exchange, routing_key, pipe, leftmost)
        try:
            payload["headers"]["redelivered"] = True
            payload["properties"]["delivery_info"]["redelivered"] = True
        except KeyError:
            pass
        for queue, key in targets:
            key = key or self._q_for_pri(queue, pri)
            queues.push_in(pipe, key, kombu_json(payload), leftmost)  # registers an owner's list

    def _connparams(self, asynchronous=False):
        # a reset can close the kombu connection (its transport's client set to None) while
        # this channel still closes or restores its unacked messages: reuse the last params
        # instead of raising AttributeError, which ends the worker (kombu 5.7)
        transport = getattr(self, "connection", None)
        last = self._last_connparams.get(asynchronous)
        client = None if transport is None else transport.client
        if (client is None or isinstance(client, _LastSentinels)) and last is not None:
            log.warning(
                "broker connection closed under a channel: reconnecting with its last settings"
            )
            return dict(last)
        params = super()._connparams(asynchronous=asynchronous)
        self._last_connparams = {**self._last_connparams, asynchronous: dict(params)}
        return params


class _LastSentinels:
    """Stands in for a closed kombu connection: its sentinels' URLs, all kombu reads of it."""

    def __init__(self, alt: tuple[str, ...]):
        self.alt = list(alt)


class SeamSentinelChannelMixin(SeamChannelMixin):
    """The Sentinel channel's one more private: its pool is built from the connection's
    sentinel URLs, which a closed connection no longer has."""

    _last_alt: tuple[str, ...] = ()

    def _sentinel_managed_pool(self, asynchronous=False):
        # A failover resets the connection under a channel that still restores its unacked
        # (prefetched) messages; kombu then reads connection.client.alt of a closed
        # connection, fails with "'NoneType' object has no attribute 'alt'", and the worker
        # exits (issue 36: a failover took both test workers down). Lend it the last URLs.
        transport = getattr(self, "connection", None)
        client = transport.client if transport is not None else None
        if client is not None or not self._last_alt:
            if client is not None:
                self._last_alt = tuple(client.alt)
            return super()._sentinel_managed_pool(asynchronous)  # none to lend: kombu's error
        log.warning("broker connection closed under a channel: asking its last sentinels")
        transport.client = _LastSentinels(self._last_alt)
        try:
            return super()._sentinel_managed_pool(asynchronous)
        finally:
            transport.client = None


# what tasks.transport builds its channels and transports on (with SeamChannelMixin first)
RedisChannel, RedisTransport = kombu_redis.Channel, kombu_redis.Transport
SentinelChannel, SentinelTransport = kombu_redis.SentinelChannel, kombu_redis.SentinelTransport
