"""What fleet adds to Flower, installed by ``flowerconfig.py`` (Flower runs it at start).

- The Broker page lists every fleet queue with its depth, not only the queues some live
  worker consumes: each tier of the published config and each constraint queue, so a tier
  with work waiting and no worker to serve it shows up. (Flower sums kombu's priority
  sub-lists itself, from the ``priority_steps`` in ``broker_transport_options``.)
- ``/metrics`` (Prometheus) asks for the same credentials as the UI: it names jobs and hosts.
"""
from __future__ import annotations

import logging

import redis

from fleet.cluster import read_config

log = logging.getLogger("fleet.flower")


def fleet_queue_names(client: redis.Redis) -> set[str]:
    """Every queue fleet routes to: the tiers, and the constraint queues publish recorded."""
    config = read_config(client)
    return {t.name for t in config.tiers} | set(config.constraint_queues or {})


def install() -> None:
    from flower.views import BaseHandler
    from flower.views.monitor import Metrics
    from tornado import web

    if getattr(BaseHandler, "_fleet_installed", False):
        return
    flower_queue_names = BaseHandler.get_active_queue_names

    def get_active_queue_names(self):
        names = set(flower_queue_names(self))
        try:
            names |= fleet_queue_names(_client(self.application))
        except redis.RedisError as e:
            log.warning("Broker page: cannot read fleet's queues from Redis: %s", e)
        return sorted(names)

    BaseHandler.get_active_queue_names = get_active_queue_names
    Metrics.get = web.authenticated(Metrics.get)
    BaseHandler._fleet_installed = True


def _client(application) -> redis.Redis:
    client = getattr(application, "_fleet_redis", None)
    if client is None:
        client = application._fleet_redis = redis.Redis.from_url(
            application.capp.conf.broker_url, socket_connect_timeout=2, socket_timeout=5)
    return client
