"""Named defaults (with units) and every Redis key prefix fleet uses."""

from __future__ import annotations

# --- broker / config -------------------------------------------------------
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/0"
TASK_NAME = "fleet.train"

# --- job records and leases (shared by publish, worker, reaper, CLI) ------
KEY_PREFIX = "fleet:"
JOB_KEY = KEY_PREFIX + "job:"  # hash per job: fleet:job:<job_id>
LEASE_KEY = KEY_PREFIX + "lease:"  # string with TTL: fleet:lease:<job_id>
GANG_KEY = KEY_PREFIX + "gang:"  # hash per gang job (nodes = N): its members (state.gang)
GANG_FORMING_ZSET = KEY_PREFIX + "gangs:forming"  # gangs forming, oldest (priority, age) first
JOBS_INDEX = KEY_PREFIX + "jobs"  # zset job_id -> created time
NAMES_INDEX = KEY_PREFIX + "names"  # hash job name -> job_id
RUNNING_SET = KEY_PREFIX + "running"  # set of job ids in state running
FALLBACK_ZSET = KEY_PREFIX + "fallback"  # zset job_id -> time its prefer_cuda grace ends
CONFIG_KEY = KEY_PREFIX + "config"  # hash: tiers, hosts (JSON), written by publish
CQUEUES_KEY = KEY_PREFIX + "cqueues"  # hash: constraint queue -> constraint JSON
REAPER_LOCK = KEY_PREFIX + "reaper-lock"
SHORT_ID_CHARS = 12  # characters of a job ID or digest in logs and tables (core.ids)
WAKE_KEY = KEY_PREFIX + "wake:"  # list per worker process: a release wakes its BRPOP
WAKE_TTL_S = 60  # a dead worker's wake list is gone after this
# string with TTL per urgent job: one host preempts for it
PREEMPT_LOCK_KEY = KEY_PREFIX + "preempt:"
# kombu's Redis transport keeps delivered, unacked messages here (its default key names)
KOMBU_UNACKED = "unacked"
KOMBU_UNACKED_INDEX = "unacked_index"
# A BRPOP whose reply was lost (Redis restarted, a connection reset mid-reply) may have taken
# a message nobody received: the worker asks for its queues to be reconciled
# (state/lua/reconcile.lua)
RECONCILE_KEY = KEY_PREFIX + "reconcile"  # hash: queue -> time of the lost poll
RECONCILE_SEEN_KEY = KEY_PREFIX + "reconcile-seen"  # set: delivery tags found in their lists
RECONCILE_CHUNK = 1000  # list entries or job records per reconcile script call
RECONCILE_SKEW_S = 60.0  # jobs created up to this long after a lost poll count (clock skew)
RECONCILE_SEEN_TTL_MS = 600_000  # the seen set outlives a reaper that died mid-pass this long
# Queued jobs whose latest message is nowhere, whatever lost it (a failover drops writes the
# old master acknowledged), are pushed again by the reaper's orphan sweep (Records.sweep_orphans)
ORPHANS_KEY = KEY_PREFIX + "orphans"  # hash: job id -> '<pushes>:<ms first found without one>'
ORPHAN_SWEEP_KEY = KEY_PREFIX + "orphan-sweep"  # string with TTL: a sweep ran this recently
ORPHAN_SEEN_KEY = KEY_PREFIX + "orphan-seen:"  # set per sweep: delivery tags in their lists
ORPHAN_SWEEP_EVERY_S = 30.0  # at most; a lease TTL when that is shorter. Also the grace

LEASE_TTL_S = 60.0
HEARTBEAT_EVERY_S = 1.0  # how often a running job checks its record (cancel) and renews
# A run that has not renewed its lease for its TTL less this (a quarter of the TTL at most)
# stops its process: a tick (1 s), KILL_GRACE_S and a second to spare, so it is gone before
# the TTL lapses and another host may take the job (tasks.lease)
LEASE_FENCE_MARGIN_S = 6.0
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

# --- job needs ----------------------------------------------------------------
# Above these a need (or a tier floor) is a typo, not hardware: the largest single machines
# hold a few TiB of RAM, a GPU under a TiB of VRAM, a few thousand cores. A need under them
# but above every live host is a feasibility warning at publish, not an error.
MAX_RAM_GIB = 64 * 1024  # 64 TiB
MAX_VRAM_GIB = 4 * 1024  # 4 TiB on one device
MAX_CORES = 64 * 1024  # logical cores
MAX_GPUS = 64  # GPUs one job may ask for on one host
MAX_NODES = 64  # hosts one gang (`nodes = N`) may span
GANG_FORM_TIMEOUT_S = 60.0  # a host holds a seat of a forming gang this long, then gives it back
GANG_BEAT_TTL_S = 5.0  # a gang member silent this long is gone (the gang stops as one)
GANG_HASH_TTL_S = 24 * 3600  # a gang's member hash expires this long after its last join
GANG_OLDER_SCAN = 16  # forming gangs just ahead of its own a waiting member may yield to
# a host that gave its seat to an older gang asks only for that gang's seats this long
GANG_YIELD_HOLD_S = 2.0

# --- artifacts --------------------------------------------------------------
# Chosen by bench/bundle.py: level 3 keeps the multi-threaded compressor at the
# speed of `zstd -T0 -3` while ratio gains above it are small for checkpoints.
ZSTD_LEVEL = 3
IO_CHUNK_BYTES = 1 << 20  # 1 MiB: the unit files, tars, zstd and hashes are read and written in
BUNDLE_NAME = "bundle.tar.zst"
META_NAME = "meta.json"
KILL_GRACE_S = 4.0  # a stopped job's process group gets this long after SIGTERM
PREEMPT_EVERY_S = 1.0  # how often a worker looks for an urgent job it could make room for
PREEMPT_HOLD_S = 120.0  # room freed by preemption is kept this long for the urgent job alone
TAIL_LINES = 40  # output lines kept for progress and errors

# --- data staged through the store ------------------------------------------
DATA_DIR = "data"  # store key of staged data: <prefix>/data/<sha256>
DATA_CACHE_DIR = "data-cache"  # under FLEET_WORK_DIR: the worker's digest cache
DATA_CACHE_GIB = 20.0  # default bound of that cache (FLEET_DATA_CACHE_GIB), GiB
ENV_CACHE_DIR = "pyenv"  # under FLEET_WORK_DIR: jobs' own Python environments (artifacts.pyenv)
ENV_CACHE_GIB = 20.0  # default bound of that cache (FLEET_ENV_CACHE_GIB), GiB
DATA_PROGRESS_MIN_BYTES = 32 << 20  # publish shows a progress bar for data this big or bigger

# --- hardening: poison queue entries, job isolation, host enrollment --------
# list, newest first: JSON {at, reason, queue, list, worker, entry}
DEAD_LETTER_KEY = KEY_PREFIX + "dead-letter"
DEAD_LETTER_MAX = 10_000  # entries kept; older ones are trimmed
DEAD_LETTER_ENTRY_MAX_CHARS = 64 * 1024  # of each set-aside entry's raw text
ENROLL_UNIT_NAME = "fleet-worker.service"
ENROLL_UNIT_DIR = "/etc/systemd/system"
ENROLL_ENV_FILE = "/etc/fleet/worker.env"  # mode 0600, read by systemd before it drops privileges
ENROLL_STATE_DIR = "fleet"  # StateDirectory=: /var/lib/fleet holds FLEET_WORK_DIR
ENROLL_UPLOAD_ALLOWANCE_S = 120  # stop timeout beyond the soft-shutdown wait, for uploads
ENROLL_WSL_SCRIPT = "/etc/fleet/fleet-worker-task.ps1"  # `fleet enroll --wsl`: run once in Windows

# --- Flower (state/events.py, tasks/events.py, tasks/control.py) -------------
EVENT_BATCH = 1000  # task-sent events per Redis PUBLISH at publish and requeue
PROGRESS_EVENT_EVERY_S = 2.0  # how often a running job's progress goes to Flower
INSPECT_CAPABILITY = "capability"  # `celery inspect capability`: a worker's hardware and queues
ANNOUNCE_REVOKED = "fleet_announce_revoked"  # control command: a worker sends Flower task-revoked
FLOWER_REVOKED_KEY = KEY_PREFIX + "flower-revoked:"  # string: which worker announced it (one does)
FLOWER_REVOKED_TTL_S = 600

# --- durable trained output and checkpoints (tasks.trained, tasks.checkpoint) ---
RUNS_DIR = "runs"  # FLEET_WORK_DIR/runs/<run>: one locked folder per run (tasks.workdirs)
# A run whose trainer exited 0 keeps its job this long after its last heartbeat, so its host,
# restarted, uploads the output; past it the reaper hands the job on (and it trains again).
TRAINED_GRACE_S = 300.0
CHECKPOINT_EVERY_S = 60.0  # how often a running job's checkpoint dir is synced, if changed
CHECKPOINTS_PREFIX = "checkpoints"  # store key: <prefix>/checkpoints/<job_id>/<sha256>.tar.zst
# A run's bundle goes first to a key of its own run token, never listed; it becomes an artifact
# (<prefix>/<kind>/<sha256>/) only once the job's record names it (tasks.upload, tasks.strays)
STAGING_DIR = ".staging"  # <prefix>/.staging/<token>/<kind>/<sha256>/bundle.tar.zst
STAGED_GRACE_S = 3600.0  # a staged bundle no record names is deleted once this old
STRAY_SWEEP_EVERY_S = 60.0  # how often one worker sweeps the staged bundles
STRAY_SWEEP_LOCK = KEY_PREFIX + "stray-sweep-lock"

# --- the fleet's store (state/fleetstore.py) -----------------------------------
# string: the store URL every publisher and worker of this fleet uses (no credentials in it),
# recorded by whoever sets the fleet up (`fleet local`, `fleet enroll`, the first worker,
# `fleet store set`)
STORE_KEY = KEY_PREFIX + "store"

# --- host heartbeats (fleet hosts, fleet why, feasibility at publish) ----------
HOST_KEY = KEY_PREFIX + "host:"  # string with TTL: fleet:host:<hostname> -> heartbeat JSON
HOSTS_INDEX = KEY_PREFIX + "hosts"  # zset hostname -> last heartbeat time (finds lost hosts too)
HOST_HEARTBEAT_EVERY_S = 5.0  # a worker rewrites its heartbeat this often
HOST_POOL_REWRITE_S = 0.5  # and at once when a job takes or leaves its pool, this often at most
HOST_TTL_S = 20.0  # a host silent this long is no longer live
HOST_FORGET_S = 24 * 3600.0  # a lost or stopped host is listed this long after it went
# counter: publish bumps it when queues or config change
QUEUES_VERSION_KEY = KEY_PREFIX + "queues-version"
# workers look at that counter this often (full refresh: QUEUE_REFRESH_EVERY_S)
QUEUE_WATCH_EVERY_S = 0.5
PICKUP_WAIT_S = 5.0  # publish waits at most this long for live hosts to consume new queues

# --- redis-server started by fleet (local fleet, tests, benches) ---------------
# Redis rewrites its AOF each time it doubles past this size; a rewrite forks and writes
# the whole dataset, which on a small host competes with a large publish for the CPU
# (a 100,000-job publish writes ~550 MB of AOF: at the 64 MB default, four rewrites).
AOF_REWRITE_MIN_SIZE_MB = 1024

# --- broker auth, TLS and Sentinel (state/broker.py, state/redis_conn.py) ----
DEFAULT_REDIS_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
# Under Sentinel, a record transition (claim, finish, publish...) is acknowledged only once
# this many replicas have it (Redis WAIT), while a replica answers; FLEET_REDIS_WAIT_REPLICAS.
SENTINEL_WAIT_REPLICAS = 1
REDIS_WAIT_TIMEOUT_MS = 500  # longest a transition waits for its replicas
REDIS_WAIT_SKIP_S = 10.0  # after a WAIT no replica answered, skip waiting this long
# fleet's own client retries a command that met a dropped connection or a demoted master
# (a Sentinel failover) this many times, backing off up to REDIS_RETRY_CAP_S between tries.
REDIS_RETRIES = 8
REDIS_RETRY_CAP_S = 2.0
# A worker's own client gives up on a reply after this long and retries (the same command,
# the same run token: every record script answers a retry as it answered the first call)
REDIS_SOCKET_TIMEOUT_S = 10.0

# --- operator views: job output in Redis, status, job references -----------
JOB_LOG_KEY = KEY_PREFIX + "log:"  # stream per job: fleet:log:<job_id>, one entry per output line
JOB_LOG_MAX_LINES = 10_000  # approximate cap per job (XADD MAXLEN ~)
JOB_LOG_MAX_LINE_CHARS = 4_096  # a longer line is cut, marked with an ellipsis
JOB_LOG_TTL_S = 7 * 24 * 3600  # the stream expires this long after its last write
JOB_LOG_FLUSH_EVERY_S = 1.0  # a worker sends buffered lines in one round trip this often
JOB_LOG_BUFFER_LINES = 50_000  # lines a worker holds while Redis is away (oldest dropped)
# list per job: fleet:metrics:<job_id>, one JSON point per metric line
METRICS_KEY = KEY_PREFIX + "metrics:"
# points kept per job, the oldest trimmed; no TTL, like the record
METRIC_HISTORY_MAX_POINTS = 10_000
METRIC_STEP_KEYS = ("step", "epoch", "round")  # a metric line's step: the first it holds
SEARCH_STEPS_MAX = 1_000  # steps kept per trial for its pruner (fleet:search:<id>:iv:<N>)
SEARCH_DECIDE_EVERY_S = 0.2  # a trial's pruner decides at most this often (its latest step)
STATUS_MAX_ROWS = 50  # `fleet status` rows shown by default (the rest are counted)
STATUS_WATCH_EVERY_S = 2.0  # `fleet status --watch` refresh period (longer if reads are slow)
MIN_ID_PREFIX = 4  # shortest job ID prefix an operator may type
CONFIRM_ABOVE_JOBS = 20  # cancel/requeue of more jobs asks (tty) or needs --yes

# --- fair share between owners (state/queues.py, state/fairshare.py, tasks/transport.py) ---
# Each queue's messages wait in one list per owner and priority:
# "<queue>\x06\x17<owner>\x06\x16<pri>".
# set of "<queue>\x06\x17<owner>" with a list that may hold messages
OWNER_LISTS_KEY = KEY_PREFIX + "owner-lists"
USAGE_KEY = KEY_PREFIX + "usage"  # hash owner -> "gpu_s core_s at": decayed usage as of at
SHARES_KEY = KEY_PREFIX + "shares"  # hash owner -> weight (`fleet share set`); absent: 1
USAGE_CHARGE_EVERY_S = 60.0  # a running job is charged to its owner this often (and when it ends)
# a worker recomputes its fair-share order (and prunes empty owner lists) this often
FAIRSHARE_REFRESH_S = 2.0

# adaptive search ([jobs.search]; state/search/store.py, docs/search.md)
SEARCH_KEY = KEY_PREFIX + "search:"  # hash per search: fleet:search:<id>; its trials under <id>:...
SEARCHES_KEY = KEY_PREFIX + "searches"  # hash search name -> the id of its one search
# set of ids with trials left or live (the sweep)
ACTIVE_SEARCHES_KEY = KEY_PREFIX + "searches:active"
DEFAULT_MAX_FAILURES = 5  # consecutive failed trials that stop a search

# pipelines (after, inputs, params_from; state/pipeline.py, lua/release.lua). An upstream or a
# follower is a member string, "job:<id>" or "search:<id>".
FOLLOWERS_KEY = KEY_PREFIX + "followers:"  # set per upstream member: its followers' members
WAITS_KEY = KEY_PREFIX + "waits:"  # set per follower member: upstreams not yet succeeded
# a large release's followers still to look at, per upstream member (lua/release_rest.lua)
RELEASING_KEY = KEY_PREFIX + "releasing:"
RELEASES_KEY = KEY_PREFIX + "releases"  # zset: upstream members with followers still to look at
# bundles one follower may take as inputs: each is fetched, verified and unpacked before it
# starts (a sweep of many points in `inputs` reaches it first; `after` fetches nothing)
MAX_INPUTS = 1_000

# --- defaults of settings (core.registry) not named above, with their units ----
UNACKED_RESTORE_INTERVAL_S = 10.0  # kombu's own default
FAIRSHARE_HALF_LIFE_S = 7 * 24 * 3600.0  # usage a week old counts half
WORKDIR_MAX_MIB = 200.0  # a bigger workdir is refused at publish
YIELD_POLL_S = 2.0  # how often the owner's activity is looked at
YIELD_RECLAIM_S = 300.0  # a yielded device is left alone this long before it is taken back
YIELD_CHECK_TIMEOUT_S = 5.0  # a busy check that runs longer counts as "not busy" (and is logged)
# the desktop itself: display servers and compositors hold a graphics context on the GPU
# that drives a screen all the time, owner present or not
YIELD_IGNORE = (
    "Xorg",
    "X",
    "Xwayland",
    "gnome-shell",
    "kwin_x11",
    "kwin_wayland",
    "plasmashell",
    "sway",
    "mutter",
    "cinnamon",
    "xfwm4",
    "gdm-x-session",
)
DEFAULT_STORE_DIR = ".fleet-local/store"  # relative to the working directory
DEFAULT_WORK_DIR = "~/.cache/fleet"
