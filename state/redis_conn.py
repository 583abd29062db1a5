"""fleet's own Redis clients (records, Lua scripts, reaper, CLI), made from ``BrokerSettings``.

fleet's clients decode replies to ``str`` (``decode_responses``), so no caller decodes bytes;
nothing fleet keeps in Redis is binary (kombu's own connections are not made here).

One function, ``connect``, for a single server (redis://, rediss://) or a Sentinel-watched
master. Under Sentinel the client asks the sentinels for the master on every new
connection and drops connections to a demoted one, so with the retries below a command
that meets a failover lands on the new master. ``explain`` turns a Redis error into the
one line an operator reads: a refused password is "authentication failed", not "cannot
reach", and neither ever shows the password.
"""

from __future__ import annotations

import logging
import time

import redis
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.retry import Retry

from core import constants as C
from core.errors import ConfigError
from state import acl
from state.broker import BrokerSettings, from_conf

log = logging.getLogger("fleet.redis")
NOT_RETRIED = (redis.AuthenticationError, redis.exceptions.AuthorizationError)
# What an outage or a failover raises: the server is away, still loading its data, or was
# demoted to a replica under us. Anything else (a script's bug, a missing ACL right, a
# refused password) would only fail the same way again.
OUTAGE = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
)


class _Retry(Retry):
    """Retry dropped connections and failovers, never a refused login (it would only repeat)."""

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        def retryable(e: Exception) -> bool:
            return not isinstance(e, NOT_RETRIED) and (is_retryable is None or is_retryable(e))

        return super().call_with_retry(do, fail, retryable, with_failure_count)


# error codes redis-py has no class for: a master with too few replicas during a failover
OUTAGE_CODES = ("NOREPLICAS",)


def outage(error: BaseException) -> bool:
    """Whether ``error`` is what an outage or a failover raises, so trying again can succeed.
    NOSCRIPT is one: a script never runs where Redis answers it, and redis-py has loaded it
    and sent it again already, so its cache was emptied between the two (a restart or a
    failover under the call); the next try loads it again."""
    if isinstance(error, redis.exceptions.NoScriptError):
        return True
    if isinstance(error, redis.ResponseError) and str(error).startswith(OUTAGE_CODES):
        return True
    return isinstance(error, OUTAGE) and not isinstance(error, NOT_RETRIED)


def _retry() -> Retry:
    return _Retry(ExponentialBackoff(cap=C.REDIS_RETRY_CAP_S, base=0.05), C.REDIS_RETRIES)


class _Replicas:
    """WAIT for replicas after a write, while one answers (shared by a client and its pipelines)."""

    def __init__(self, wanted: int):
        self.wanted, self.skip_until = wanted, 0.0

    def wait_args(self) -> tuple | None:
        if self.wanted <= 0 or time.monotonic() < self.skip_until:
            return None
        return ("WAIT", self.wanted, C.REDIS_WAIT_TIMEOUT_MS)

    def acked(self, count) -> None:
        if int(count) < self.wanted:
            # no replica: the transition stands on the master alone; try again later
            self.skip_until = time.monotonic() + C.REDIS_WAIT_SKIP_S
            log.warning(
                "only %s of %s replica(s) acknowledged within %d ms; not waiting for "
                "replicas for %gs",
                count,
                self.wanted,
                C.REDIS_WAIT_TIMEOUT_MS,
                C.REDIS_WAIT_SKIP_S,
            )


class FleetRedis(redis.Redis):
    """redis.Redis whose Lua transitions (EVALSHA) return only once replicas have them."""

    replicas = _Replicas(0)

    def evalsha(self, *args, **kwargs):
        result = super().evalsha(*args, **kwargs)
        self._wait()
        return result

    def _wait(self) -> None:
        wait = self.replicas.wait_args()
        if wait:
            self.replicas.acked(self.execute_command(*wait))

    def pipeline(self, transaction=True, shard_hint=None):
        pipe = _FleetPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.replicas = self.replicas
        return pipe


class _FleetPipeline(Pipeline):
    replicas = _Replicas(0)

    def execute(self, raise_on_error: bool = True):
        wait = None if self.transaction else self.replicas.wait_args()
        if not wait or not any(args[0] in ("EVALSHA", "EVAL") for args, _ in self.command_stack):
            return super().execute(raise_on_error)
        self.execute_command(*wait)
        *results, acked = super().execute(raise_on_error)
        self.replicas.acked(acked)
        return results


def _driver() -> dict:
    """The client's name and version as redis-py sends them (CLIENT SETINFO), given: redis-py
    7.2 and later otherwise read its version from the installed package's metadata for every
    client (importlib.metadata scanning sys.path, 4% of a `fleet status` that makes two), where
    ``redis.__version__`` holds the same. An older redis-py reads it once, at its import."""
    info = getattr(redis, "DriverInfo", None)
    return {"driver_info": info(lib_version=redis.__version__)} if info else {}


def connect(settings: BrokerSettings, **kw) -> FleetRedis:
    """A client for ``settings`` that decodes replies.

    ``kw`` are redis.Redis socket options (timeouts...).
    """
    kw = {"retry": _retry(), "decode_responses": True, **_driver(), **kw}
    if settings.sentinel:
        from redis.sentinel import Sentinel

        sentinel_kw = {"password": settings.sentinel_password} if settings.sentinel_password else {}
        sentinel_kw.update(
            socket_connect_timeout=kw.get("socket_connect_timeout", 5),
            socket_timeout=kw.get("socket_connect_timeout", 5),
        )
        sentinels = Sentinel(list(settings.hosts), sentinel_kwargs=sentinel_kw)
        client = sentinels.master_for(
            settings.master_name, redis_class=FleetRedis, **settings.redis_kwargs(), **kw
        )
    else:
        ((host, port),) = settings.hosts
        client = FleetRedis(host=host, port=port, **settings.redis_kwargs(), **kw)
    client.replicas = _Replicas(settings.wait_replicas)
    return client


def client_for(app, **kw) -> FleetRedis:
    """The client for a Celery app's broker (its ``broker_url``, which tests may change)."""
    return connect(from_conf(app.conf), **kw)


def decoding(client: redis.Redis) -> redis.Redis:
    """``client`` itself if it decodes replies (fleet's own do), else a client like it that does."""
    if client.get_encoder().decode_responses:
        return client
    pool = client.connection_pool
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        raise ConfigError(
            f"a Redis client on a {type(pool).__name__} that returns bytes: make it with "
            "decode_responses=True (state.redis_conn.connect does)"
        )
    twin = type(client)(
        connection_pool=type(pool)(
            connection_class=pool.connection_class,
            **{**pool.connection_kwargs, "decode_responses": True},
        )
    )
    if isinstance(client, FleetRedis):
        twin.replicas = client.replicas
    return twin


def explain(error: redis.RedisError, settings: BrokerSettings) -> str:
    """One line for an operator: what failed, where, which variable to fix. No secret."""
    where, var = settings.where, settings.var
    if isinstance(error, redis.AuthenticationError):
        return (
            f"authentication failed at {where} for {settings.who}: "
            f"the password in {var} was refused "
            f"(check the user and password in {var}; percent-encode @ : / in the password)"
        )
    if isinstance(error, redis.exceptions.NoPermissionError):
        return _refused(error, settings)
    if _tls_refused(error):
        return (
            f"TLS handshake with {where} failed ({_first_line(error)}); check FLEET_REDIS_CA_FILE "
            f"(the CA that signed the server's certificate) and the host name in {var}"
        )
    if settings.sentinel and "master" in str(error).lower():
        return (
            f"no master {settings.master_name!r} known to the sentinels at {where} "
            f"({_first_line(error)}); "
            "check FLEET_SENTINEL_MASTER and that the sentinels are up"
        )
    return (
        f"cannot reach Redis at {where} ({var}): {_first_line(error)}; start it, or point {var} at "
        "your broker (`fleet local --keep` starts one here and prints the export lines)"
    )


def refused(what: str, error: redis.RedisError, settings: BrokerSettings) -> str:
    """One line for an error that is not an outage: the operation, the role it ran as, the fix."""
    if isinstance(error, (redis.AuthenticationError, redis.exceptions.NoPermissionError)):
        return f"{what}: {explain(error, settings)}"
    role = acl.role_of(settings.username)
    who = f"Redis user {settings.username!r} ({role.value} role)" if role else settings.who
    return (
        f"{what}: Redis at {settings.where} refused it from {who}: {_first_line(error)}; "
        "not an outage, so not retried"
    )


def _refused(error: Exception, settings: BrokerSettings) -> str:
    role = acl.role_of(settings.username)
    if role is None:
        return (
            f"Redis {settings.who} at {settings.where} may not do this ({_first_line(error)}); "
            "give that ACL user the commands and keys fleet uses (`fleet acl`), "
            "or use the default user"
        )
    if role is acl.Role.OPERATOR:
        return (
            f"Redis user {settings.username!r} has the operator role at {settings.where}, "
            f"which may not do this ({_first_line(error)}); "
            f"it needs the administrator's login (the default user) in {settings.var}"
        )
    return (
        f"Redis user {settings.username!r} has the {role.value} role at {settings.where} "
        f"and lacks the operator role this needs ({_first_line(error)}); "
        f"set {settings.var} to the {acl.USERS[acl.Role.OPERATOR]} user's URL (see `fleet acl`)"
    )


def _tls_refused(error: Exception) -> bool:
    text = str(error).lower()
    return any(w in text for w in ("certificate", "ssl", "tls", "wrong version number"))


def _first_line(error: Exception) -> str:
    """The error's first line as a clause of ours: redis-py ends its sentences with a full
    stop ("Connection refused."), which before our "; fix ..." read as ".;"."""
    return (str(error).splitlines() or [type(error).__name__])[0].rstrip(". ") or type(
        error
    ).__name__


__all__ = ["FleetRedis", "client_for", "connect", "decoding", "explain", "outage", "refused"]
