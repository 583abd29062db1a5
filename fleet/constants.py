"""Named defaults (with units) and every Redis key prefix fleet uses."""
from __future__ import annotations

# --- broker / config -------------------------------------------------------
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
TASK_NAME = "fleet.train"

# --- job records and leases (shared by publish, worker, reaper, CLI) ------
KEY_PREFIX = "fleet:"
JOB_KEY = KEY_PREFIX + "job:"            # hash per job: fleet:job:<job_id>
LEASE_KEY = KEY_PREFIX + "lease:"        # string with TTL: fleet:lease:<job_id>
JOBS_INDEX = KEY_PREFIX + "jobs"         # zset job_id -> created time
NAMES_INDEX = KEY_PREFIX + "names"       # hash job name -> job_id
RUNNING_SET = KEY_PREFIX + "running"     # set of job ids in state running
FALLBACK_ZSET = KEY_PREFIX + "fallback"  # zset job_id -> time its prefer_cuda grace ends
CONFIG_KEY = KEY_PREFIX + "config"       # hash: tiers, hosts (JSON), written by publish
CQUEUES_KEY = KEY_PREFIX + "cqueues"     # hash: constraint queue -> constraint JSON
REAPER_LOCK = KEY_PREFIX + "reaper-lock"
# kombu's Redis transport keeps delivered, unacked messages here (its default key names)
KOMBU_UNACKED = "unacked"
KOMBU_UNACKED_INDEX = "unacked_index"

LEASE_TTL_S = 60.0
HEARTBEAT_EVERY_S = 1.0          # how often a running job checks its record (cancel) and renews
REAPER_EVERY_S = 5.0
DEFAULT_MAX_ATTEMPTS = 3
PREFER_CUDA_GRACE_S = 300.0
# Longer than any job we expect; Redis redelivery is a backstop, never the mechanism.
VISIBILITY_TIMEOUT_S = 7 * 24 * 3600
QUEUE_REFRESH_EVERY_S = 10.0

# --- priorities -------------------------------------------------------------
# Manifest priority 9 is the most urgent. kombu's Redis transport serves
# priority 0 first, so the wire priority is inverted.
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 5

# --- artifacts --------------------------------------------------------------
# Chosen by bench/bundle.py: level 3 keeps the multi-threaded compressor at the
# speed of `zstd -T0 -3` while ratio gains above it are small for checkpoints.
ZSTD_LEVEL = 3
BUNDLE_NAME = "bundle.tar.zst"
META_NAME = "meta.json"
TAIL_LINES = 40                  # output lines kept for progress and errors

# --- redis-server started by fleet (local fleet, tests, benches) ---------------
# Redis rewrites its AOF each time it doubles past this size; a rewrite forks and writes
# the whole dataset, which on a small host competes with a large publish for the CPU
# (a 100,000-job publish writes ~550 MB of AOF: at the 64 MB default, four rewrites).
AOF_REWRITE_MIN_SIZE_MB = 1024
