"""Celery settings for fleet, read from the environment once.

Flat and free of side effects. Every FLEET_* variable is declared in ``core.registry``
and read through it; a bad value raises ConfigError naming the variable.
"""

from core.registry import (
    FLEET_ADOPT_UNPUBLISHED,
    FLEET_BROKER_URL,
    FLEET_CHECKPOINT_EVERY_S,
    FLEET_LEASE_TTL_S,
    FLEET_REDIS_SOCKET_TIMEOUT_S,
    FLEET_RESULT_BACKEND,
    FLEET_STAGED_GRACE_S,
    FLEET_STRAY_SWEEP_EVERY_S,
    FLEET_TRAINED_GRACE_S,
    FLEET_UNACKED_RESTORE_INTERVAL_S,
    FLEET_VISIBILITY_TIMEOUT_S,
)
from state import broker as _broker

# redis://, rediss:// (TLS, FLEET_REDIS_CA_FILE) or sentinel:// (FLEET_SENTINEL_MASTER):
# state.broker
_broker_at = _broker.from_env(FLEET_BROKER_URL)
_results_at = _broker.from_env(FLEET_RESULT_BACKEND, _broker_at.url)
broker_url = _broker_at.url
result_backend = _results_at.url
broker_use_ssl = _broker_at.ssl or False
redis_backend_use_ssl = _results_at.ssl or None

# JSON only: a pickled message is refused before any code of ours sees it.
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
result_accept_content = ["json"]
event_serializer = "json"

# One job at a time per slot, acknowledged only when it ended. If a worker is lost,
# the job's lease expires and the reaper requeues it: ack and let the lease decide.
task_acks_late = True
worker_prefetch_multiplier = 1
task_reject_on_worker_lost = False
task_acks_on_failure = True
task_acks_on_timeout = True
# Jobs run as subprocesses: the pool only waits on them, so threads are enough and the
# worker never forks a parent that might have touched CUDA.
worker_pool = "threads"
worker_hijack_root_logger = False

# Redis redelivers an unacked message after visibility_timeout; set it above the longest
# job so it stays a backstop (leases and the reaper are the mechanism). kombu reads it
# from the broker and the result backend transport options.
fleet_lease_ttl_s = FLEET_LEASE_TTL_S.value()
# how long a worker's own Redis client waits for a reply before it retries the command
fleet_redis_socket_timeout_s = FLEET_REDIS_SOCKET_TIMEOUT_S.value()
visibility_timeout = FLEET_VISIBILITY_TIMEOUT_S.value()
# How often kombu looks for unacked messages older than visibility_timeout (about
# interval x throttle seconds; kombu's default is 10 x 10).
unacked_restore_interval = FLEET_UNACKED_RESTORE_INTERVAL_S.value()
_restore_given = FLEET_UNACKED_RESTORE_INTERVAL_S.source() == "env"
broker_transport_options = {
    "visibility_timeout": visibility_timeout,
    "unacked_restore_interval": unacked_restore_interval,
    "unacked_restore_throttle": 1 if _restore_given else 10,
    "queue_order_strategy": "priority",  # most demanding tier first
    "priority_steps": list(range(10)),
    **_broker_at.transport_options(),  # Sentinel: master_name
}
result_backend_transport_options = {
    "visibility_timeout": visibility_timeout,
    **_results_at.transport_options(),
}
# Stock Redis transport (or its Sentinel one), except a worker serves its queues in order first,
# priority second: tasks.transport.register() points redis://, rediss:// and sentinel:// at
# them, so the URL stays plain (Flower reads it).
# A job that outlives a broker blip keeps running (its lease covers it); Celery 6 flips
# this default, so it is said here.
worker_cancel_long_running_tasks_on_connection_loss = False
# Soft shutdown: on a cold shutdown (SIGQUIT, a second Ctrl+C) running jobs are told to stop
# their process groups and put themselves back at the front of their queues, and get up to
# this long for it before Celery cancels them (tasks.worker.FleetWorker). SIGTERM (warm)
# does the same with no limit.
worker_soft_shutdown_timeout = 15.0
broker_connection_retry_on_startup = True
broker_connection_max_retries = None

# Flower and `fleet` watch these.
worker_send_task_events = True
task_send_sent_event = True
task_track_started = True
result_extended = True
result_expires = 30 * 24 * 3600

# A message for a job with no record (sent with apply_async, not `fleet publish`) is set
# aside in the dead-letter list, not run, unless this is on.
fleet_adopt_unpublished = FLEET_ADOPT_UNPUBLISHED.value()

task_create_missing_queues = True
task_default_queue = "cpu"
task_routes = ("tasks.router.route_task",)

# Durable trained output (tasks.trained) and checkpoint sync (tasks.checkpoint): how long a
# trained run waits for its host to come back, how often a checkpoint dir is synced.
fleet_trained_grace_s = FLEET_TRAINED_GRACE_S.value()
fleet_checkpoint_every_s = FLEET_CHECKPOINT_EVERY_S.value()

# Staged bundles (tasks.strays): one no record names is deleted once this old; how often
# one worker sweeps them.
fleet_staged_grace_s = FLEET_STAGED_GRACE_S.value()
fleet_stray_sweep_every_s = FLEET_STRAY_SWEEP_EVERY_S.value()
