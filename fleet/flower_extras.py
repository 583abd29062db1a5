"""What fleet adds to Flower, installed by ``flowerconfig.py`` (Flower runs it at start).

- The Broker page lists every fleet queue with its depth, not only the queues some live
  worker consumes: each tier of the published config and each constraint queue, so a tier
  with work waiting and no worker to serve it shows up. Each queue's depth sums kombu's
  priority sub-lists (``priority_steps`` in ``broker_transport_options``) and every owner's
  lists (fair share, state.queues).
- ``/metrics`` (Prometheus) asks for the same credentials as the UI: it names jobs and hosts.
- The pages say what fleet knows (``fleet.flower_view``): the Tasks page shows a short ID,
  each job's owner and the GPUs it holds; the Workers page each worker's GPUs and cores, from
  the heartbeats ``fleet hosts`` reads; Celery's pool controls are hidden.
- Flower started after the jobs (it saw none of their events) lists them as their records
  say (``seed_tasks``): queued, running and ended, up to its ``max_tasks`` newest. A queued
  job sorts first by time received (``flower_view.sort_key``), so it is on page 1.
- A page per search (``/fleet/search/NAME``, listed at ``/fleet/searches``; the link is in the
  navigation bar): its budget, failures and stop reason, its leaderboard and every trial's
  learning curve, drawn from ``/fleet/api/search/NAME`` (``fleet.query.searchpage``), which
  the page polls.
- Logged in as the read-only role's Redis user (``state.acl``), Flower may not send control
  commands: it does not ask workers to turn events on (they send them already) nor to send
  a heartbeat when it starts listening; workers' own heartbeats tell it who is up.
- SIGTERM stops Flower wherever its main thread is (``stop_on_signal``), within
  ``STOP_GRACE_S`` at most: Flower's own handler can be swallowed and leave it running.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import redis

from core import constants as C
from core.errors import ConfigError
from core.registry import FLEET_BROKER_URL
from fleet import flower_view as view
from fleet.query import searchpage
from fleet.query.hosts import live_hosts, read_hosts
from fleet.query.pipeline import edges_of
from state import acl
from state import queues as Q
from state.cluster import read_config
from state.jobrecord import JobState, fetch_many

log = logging.getLogger("fleet.flower")
DEFAULT_ADDRESS = "127.0.0.1"
HEARTBEATS_EVERY_S = 1.0
WAITS_EVERY_S = 1.0  # how long a waiting job's Waits for cell is reused before a new read
WAITS_CACHE_MAX = 10_000  # cells kept at most (a page shows tens): then all are read again
STOP_GRACE_S = 5.0  # after SIGTERM, Flower's process ends by this time whatever its threads do
AUTH_OPTIONS = ("basic_auth", "auth")  # Flower's command-line options that turn auth on


def basic_auth_users(raw: str) -> list[str]:
    """FLOWER_BASIC_AUTH as Flower wants it; a bad entry is named by position, never shown."""
    users = [u.strip() for u in raw.split(",") if u.strip()]
    for i, user in enumerate(users, 1):
        name, sep, password = user.partition(":")
        if not (sep and name and password):
            raise ConfigError(
                f"FLOWER_BASIC_AUTH entry {i}: expected user:password (several users: "
                "comma-separated), e.g. FLOWER_BASIC_AUTH=ops:a-long-secret"
            )
    return users


def settings(env: Mapping[str, str], argv: Sequence[str]) -> dict:
    """Flower options fleet sets: a loopback address, and auth or a refusal to start."""
    out: dict = {"address": env.get("FLOWER_ADDRESS") or DEFAULT_ADDRESS}
    given = {a.lstrip("-").split("=")[0].replace("-", "_") for a in argv if a.startswith("--")}
    if env.get("FLOWER_BASIC_AUTH"):
        out["basic_auth"] = basic_auth_users(env["FLOWER_BASIC_AUTH"])
    elif not (
        given & set(AUTH_OPTIONS)
        or env.get("FLOWER_AUTH")
        or env.get("FLOWER_UNAUTHENTICATED", "").lower() in ("1", "true", "yes")
    ):
        raise ConfigError(
            "refusing to start Flower without authentication; set "
            "FLOWER_BASIC_AUTH=user:password (or --basic-auth=user:password), "
            "or FLOWER_UNAUTHENTICATED=1 for a local try on 127.0.0.1"
        )
    if _read_only(FLEET_BROKER_URL.value(env)):
        out["enable_events"] = False
    return out


def _read_only(url: str) -> bool:
    from urllib.parse import unquote, urlsplit

    user = urlsplit(url.split(";")[0]).username
    return acl.role_of(unquote(user) if user else None) is acl.Role.READONLY


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
    _install_pages()
    _install_seed()
    _install_search_pages()
    from flower.utils.broker import RedisBase

    RedisBase.queues = queue_lengths
    _tolerate_no_wakeup()
    _install_stop()
    Metrics.get = web.authenticated(Metrics.get)
    BaseHandler._fleet_installed = True


def _install_stop() -> None:
    """Flower's SIGTERM handler raises SystemExit wherever its main thread is. Raised inside a
    finalizer (a weakref callback, a ``__del__``), Python prints "Exception ignored" and goes
    on: Flower kept running, its events thread retrying a broker that was gone for good (a
    whole-suite run on a busy machine). Its command installs ``flower.command.sigterm_handler``
    when it runs, after this file: that name now stops Flower as below."""
    import flower.command

    flower.command.sigterm_handler = stop_on_signal


def stop_on_signal(signum, _frame) -> None:
    """Stop Flower's IOLoop, so its command returns and its exit hooks run; end the process
    if it is still there ``STOP_GRACE_S`` later (a thread that does not stop)."""
    import os
    import threading

    from tornado.ioloop import IOLoop

    log.info("signal %s: Flower stops", signum)
    loop = IOLoop.current()
    loop.add_callback(loop.stop)
    last_resort = threading.Timer(STOP_GRACE_S, os._exit, args=(0,))
    last_resort.daemon = True  # a process that ends sooner does not wait for it
    last_resort.start()


async def queue_lengths(self, names) -> list[dict]:
    """Flower's RedisBase.queues, counting every owner's lists of each queue too."""
    names = list(names)
    try:
        members = await self.redis.smembers(self.broker_prefix + C.OWNER_LISTS_KEY)
        owners = Q.owners_by_queue(m.decode() if isinstance(m, bytes) else m for m in members)
        keys = {name: Q.keys_of(name, owners.get(name, ()), self.priority_steps) for name in names}
        async with self.redis.pipeline() as pipeline:
            for name in names:
                for key in keys[name]:
                    pipeline.llen(self.broker_prefix + key)
            lengths = iter(await pipeline.execute())
        return [
            {"name": name, "messages": sum(next(lengths) for _ in keys[name])} for name in names
        ]
    finally:
        close = getattr(self.redis, "aclose", None) or self.redis.close
        await close()


def _install_pages() -> None:
    """fleet's columns on the Tasks page, its style and script in every page, and each
    worker's GPUs and cores in the Workers page's rows (``fleet_resources``)."""
    from flower.events import EventsState
    from flower.views import BaseHandler
    from flower.views import tasks as task_views
    from flower.views.workers import WorkersView

    task_views.TASK_COLUMNS.update(view.TASK_COLUMNS)
    for handler in (BaseHandler, task_views.TasksDataTable):
        _fill_waits(handler)
    EventsState.Task = view.FleetTask  # before Flower makes its state: it keeps fleet's fields
    render_string = BaseHandler.render_string
    BaseHandler.render_string = lambda self, *a, **kw: view.with_page_extras(
        render_string(self, *a, **kw)
    )
    as_dict = WorkersView._as_dict

    def _as_dict(self, worker):
        out = as_dict(worker)  # Flower's classmethod, bound to the class
        out["fleet_resources"] = view.worker_resources(
            _heartbeats(self.application).get(worker.hostname)
        )
        return out

    WorkersView._as_dict = _as_dict


def _fill_waits(handler) -> None:
    """A PENDING task's Waits for cell, filled from Redis as the page draws it: Flower knows a
    waiting follower only by the ``task-sent`` its publish sent, not by what it waits on.
    Wrapped around Flower's ``format_task`` (the Tasks table's and the task page's)."""
    format_task = handler.format_task

    def formatted(self, task):
        out = format_task(self, task)
        got = out[1] if isinstance(out, tuple) else out
        if got is not None and got.state in view.QUEUED:
            got.waits = waits_of(self.application, got.uuid)
        return out

    handler.format_task = formatted


def waits_of(application, job_id: str) -> str:
    """What the job waits on ('' when it does not wait), read at most once a second per job
    (the Tasks page redraws every few seconds); '' when Redis cannot say."""
    cache = application.__dict__.setdefault("_fleet_waits", {})
    at, text = cache.get(job_id, (0.0, ""))
    if time.monotonic() - at < WAITS_EVERY_S:
        return text
    try:
        text = waits_texts(_client(application), [job_id]).get(job_id, "")
    except redis.RedisError as e:
        log.warning("Tasks page: cannot read what job %s waits on from Redis: %s", job_id, e)
    if len(cache) > WAITS_CACHE_MAX:
        cache.clear()
    cache[job_id] = (time.monotonic(), text)
    return text


def waits_texts(client: redis.Redis, job_ids: Sequence[str]) -> dict[str, str]:
    """What each waiting job of ``job_ids`` waits on, by ID (other jobs left out)."""
    waiting = [
        r for r in fetch_many(client, job_ids, ("state", "after")) if r.state is JobState.WAITING
    ]
    edges = edges_of(client, waiting)
    return {r.job_id: view.waits_text(edges.get(r.job_id, ())) for r in waiting}


def _heartbeats(application) -> dict[str, dict]:
    """Each live worker's heartbeat by its Celery node name, read at most once a second (the
    Workers page asks every second, once per worker); none when Redis cannot say."""
    at, beats = getattr(application, "_fleet_heartbeats", (0.0, {}))
    if time.monotonic() - at < HEARTBEATS_EVERY_S:
        return beats
    try:
        beats = {
            h.nodename: {"capability": h.capability}
            for h in live_hosts(_client(application))
            if h.nodename
        }
    except redis.RedisError as e:
        log.warning("Workers page: cannot read the workers' heartbeats from Redis: %s", e)
    application._fleet_heartbeats = (time.monotonic(), beats)
    return beats


def _client(application) -> redis.Redis:
    client = getattr(application, "_fleet_redis", None)
    if client is None:
        client = application._fleet_redis = redis.Redis.from_url(
            application.capp.conf.broker_url,
            socket_connect_timeout=2,
            socket_timeout=5,
            decode_responses=True,
        )
    return client


def _tolerate_no_wakeup() -> None:
    """Flower listens with ``wakeup=True`` (a heartbeat broadcast): a user that may not
    publish would end every capture there, so the refusal is noted and listening goes on."""
    from celery.events.receiver import EventReceiver

    wakeup = EventReceiver.wakeup_workers

    def wakeup_workers(self, channel=None):
        try:
            wakeup(self, channel)
        except Exception as e:  # kombu wraps Redis's refusal in its OperationalError
            if not isinstance(
                e.__cause__ or e.__context__ or e, redis.exceptions.NoPermissionError
            ) and "no permissions" not in str(e):
                raise
            log.info(
                "Flower's Redis user may not send control commands (read-only role): "
                "workers are not woken, their heartbeats arrive on their own"
            )

    EventReceiver.wakeup_workers = wakeup_workers


def seed_tasks(state, client: redis.Redis, limit: int) -> int:
    """Bring Flower's task state up to the records of the ``limit`` newest jobs: a job it has
    not heard of is added, and one it last saw queued or running that has ended since (a
    persistent Flower that was down) takes its end; the tasks changed. Later events merge into
    these as usual."""
    from celery.events.state import Worker

    ids = client.zrevrange(C.JOBS_INDEX, 0, max(limit, 1) - 1)
    nodes = {h.hostname: h.nodename for h in read_hosts(client) if h.nodename}
    changed = 0
    recs = fetch_many(client, ids)
    edges = edges_of(client, [r for r in recs if r.state is JobState.WAITING])
    for rec in recs:
        fields = view.task_fields(rec, edges.get(rec.job_id, ()))
        task = state.tasks.get(rec.job_id)
        if task is None:
            task = state.tasks[rec.job_id] = state.Task(rec.job_id, cluster_state=state)
        elif task.state in view.ENDED_AT or not rec.state.terminal:
            continue  # Flower's own events know this one as well as the record
        task.__dict__.update(fields)
        if rec.worker and task.state not in view.QUEUED:
            # named as Flower's own events name it (its node), not by the record's host
            task.worker = Worker(hostname=view.worker_name(rec.worker, nodes))
        state.search_engine.upsert(task)
        changed += 1
    return changed


def _install_seed() -> None:
    from flower import events
    from flower.utils import search

    init = events.Events.__init__

    def __init__(self, capp, *args, max_tasks_in_memory, **kwargs):
        init(self, capp, *args, max_tasks_in_memory=max_tasks_in_memory, **kwargs)
        client = redis.Redis.from_url(
            capp.conf.broker_url, socket_connect_timeout=2, socket_timeout=10, decode_responses=True
        )
        try:
            n = seed_tasks(self.state, client, max_tasks_in_memory)
            log.info("listed %d job(s) from fleet's records that Flower had no events of", n)
        except redis.RedisError as e:
            log.warning("cannot read fleet's job records; Flower lists only what it sees: %s", e)
        finally:
            client.close()

    events.Events.__init__ = __init__
    flower_key = search._task_sort_key
    search._task_sort_key = lambda task, sort_by, task_id: view.sort_key(
        flower_key, task, sort_by, task_id
    )


def _install_search_pages() -> None:
    """``/fleet/searches``, ``/fleet/search/NAME`` and its JSON, before Flower's catch-all."""
    from flower import urls
    from flower.views import BaseHandler
    from tornado import web
    from tornado.ioloop import IOLoop

    class SearchData(BaseHandler):
        @web.authenticated
        async def get(self, name):
            client = _client(self.application)
            data = await IOLoop.current().run_in_executor(None, searchpage.read, client, name)
            if data is None:
                raise web.HTTPError(404, f"no search named {name!r}")
            self.set_header("Cache-Control", "no-store")
            self.write(view.json_text(data))
            self.set_header("Content-Type", "application/json")

    class SearchPage(BaseHandler):
        @web.authenticated
        def get(self, name):
            self.write(view.search_page(name, _prefix(self.application)))

    class SearchIndex(BaseHandler):
        @web.authenticated
        async def get(self):
            client = _client(self.application)
            rows = await IOLoop.current().run_in_executor(None, searchpage.index, client)
            self.write(view.search_index(rows, _prefix(self.application)))

    urls.handlers[0:0] = [
        (r"/fleet/searches/?", SearchIndex),
        (r"/fleet/search/(.+)", SearchPage),
        (r"/fleet/api/search/(.+)", SearchData),
    ]


def _prefix(application) -> str:
    prefix = (getattr(application.options, "url_prefix", "") or "").strip("/")
    return f"/{prefix}" if prefix else ""
