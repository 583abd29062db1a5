"""`fleet enroll`: make this host a fleet worker under systemd.

Checks first (Redis and the store reachable with the settings in this shell, the queues
the host will serve), then writes the unit and its EnvironmentFile (mode 0600).
"""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path
from urllib.parse import urlparse

from core import constants as C
from core.constants import YIELD_POLL_S, YIELD_RECLAIM_S
from core.errors import FleetError, StoreError, UsageError
from core.files import atomic_write
from core.registry import (
    FLEET_BROKER_URL,
    FLEET_JOB_USER,
    FLEET_RESULT_BACKEND,
    FLEET_STORE_URL,
)
from core.settings import YieldSettings
from fleet import enroll
from fleet.cli.common import console, err, where


def _check_redis(var: str, url: str):
    """A client for the Redis at ``url`` (read from ``var``) once it answered; else the error
    as ``state.redis_conn.explain`` says it (a refused password is not "cannot reach")."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from state.broker import parse
    from state.redis_conn import connect, explain

    settings = parse(url, var=var)
    client = connect(
        settings, socket_connect_timeout=5, socket_timeout=10, retry=Retry(NoBackoff(), 0)
    )
    try:
        client.ping()
    except redis.exceptions.NoPermissionError as e:
        raise FleetError(f"{var}: {explain(e, settings)}") from None
    except redis.ResponseError as e:
        raise FleetError(f"{var}: Redis at {settings.where} answered {e}") from None
    except redis.RedisError as e:
        raise FleetError(f"{var}: {explain(e, settings)}") from None
    return client


def _check_store(env) -> str:
    from artifacts.stores import open_store
    from core.settings import StoreSettings

    url = FLEET_STORE_URL.value(env)
    try:
        open_store(StoreSettings.from_env(env)).ping()
    except StoreError as e:
        raise FleetError(f"FLEET_STORE_URL: the store is not usable from this host: {e}") from None
    return url


def _record_store(client, url: str, broker: str) -> None:
    """This host's store becomes the fleet's (``state.fleetstore``) if none is recorded; a
    host whose store is not the fleet's is refused before anything is written."""
    from state import fleetstore

    fleetstore.settle(client, url, url, "host", broker, record_it=True)


def _queues(client) -> tuple[list[str], bool, str]:
    from routing.detect import detect
    from state.cluster import read_config

    cap = detect()
    queues = read_config(client).queues(cap)
    if not queues:
        raise FleetError(
            f"host {cap.hostname} qualifies for no tier of this fleet; see `fleet capability`"
        )
    return queues, bool(cap.cuda_devices), cap.hostname


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


def _mask(name: str, value: str) -> str:
    from core.secrets import URL_USERINFO, is_secret, masked

    if URL_USERINFO.search(value):
        return masked(value)
    return "<hidden>" if is_secret(name, value, set()) else value


def _roles_exist(client) -> bool:
    """Whether this Redis has fleet's role users (only an administrator may list users)."""
    import redis

    from state import acl

    try:
        return acl.USERS[acl.Role.WORKER] in client.execute_command("ACL", "USERS")
    except redis.ResponseError:
        return False


def _login(env, client) -> enroll.Login:
    login = enroll.worker_login(env)
    if login.as_admin and client is not None and _roles_exist(client):
        raise FleetError(
            "FLEET_BROKER_URL logs in as the administrator, and this Redis has fleet's role users: "
            "set FLEET_ACL_WORKER_PASSWORD to the fleet-worker user's password so that this host "
            "gets the worker's login, not the administrator's, and run `fleet enroll` again"
        )
    if login.as_admin:
        err.print(
            "warning: this host gets the default Redis user's password; "
            "give workers their own login "
            "with `fleet acl --apply` and FLEET_ACL_WORKER_PASSWORD",
        )
    return login


# Read by --wsl (module names, so a test can point them at files of its own)
OSRELEASE = Path("/proc/sys/kernel/osrelease")
SYSTEMD_RUNNING = Path("/run/systemd/system")  # exists while systemd is PID 1 (sd_booted)


def _wsl_task(args, env) -> tuple[str, str]:
    """The Scheduled Task script for this WSL2 distribution, and where Windows finds it."""
    from fleet import wsl

    info, script = wsl.enrollment(
        OSRELEASE.read_text(),
        env,
        Path(wsl.NVML_LIB).exists(),
        SYSTEMD_RUNNING.is_dir(),
        C.ENROLL_UNIT_NAME,
        args.wsl_trigger,
        args.wsl_windows_user or "",
    )
    if not info.nvml:
        err.print(
            f"warning: no NVML at {wsl.NVML_LIB}: "
            "install the NVIDIA driver on Windows (never inside WSL); "
            "until then this host serves CPU jobs only",
        )
    return script, info.distro


def _write(path: Path, text: str, mode: int) -> None:
    atomic_write(path, text, mode)  # never readable by others, not even briefly


def cmd_enroll(args) -> int:
    import celeryconfig

    env = dict(os.environ)
    values = enroll.settings(env)
    task = _wsl_task(args, env) if args.wsl else None
    if not args.skip_checks:
        client = _check_redis(FLEET_BROKER_URL.name, FLEET_BROKER_URL.value(env))
        login = _login(env, client)
        values.update(login.urls)
        # the worker's own login works too
        if login.urls[FLEET_BROKER_URL.name] != FLEET_BROKER_URL.value(env):
            client = _check_redis(FLEET_BROKER_URL.name, login.urls[FLEET_BROKER_URL.name])
        if login.urls.get(FLEET_RESULT_BACKEND.name):
            _check_redis(FLEET_RESULT_BACKEND.name, login.urls[FLEET_RESULT_BACKEND.name])
        store = _check_store(env)
        _record_store(client, store, FLEET_BROKER_URL.value(env))
        queues, gpu, host = _queues(client)
        console.print(
            f"Redis {where(FLEET_BROKER_URL.value(env))}: reachable; "
            f"store {where(store)}: reachable and writable"
        )
        console.print(f"host {host} will serve: {', '.join(queues)}")
    else:
        from routing.detect import detect

        values.update(_login(env, None).urls)
        gpu = bool(detect().cuda_devices)
    store_url = urlparse(FLEET_STORE_URL.value(env))
    if store_url.scheme == "file":
        err.print(
            "warning: FLEET_STORE_URL is a file:// store: "
            "other hosts cannot read what this one stores",
        )
    if args.yield_to_owner or args.yield_check or args.yield_idle_hint:
        values.update(
            enroll.yield_values(
                True,
                args.yield_check,
                args.yield_idle_hint,
                args.yield_reclaim_s,
                args.yield_poll_s,
            )
        )
    elif args.yield_reclaim_s is not None or args.yield_poll_s is not None:
        raise UsageError(
            "--yield-reclaim-s / --yield-poll-s tune yielding, which is off: add --yield "
            "(or --yield-check COMMAND)"
        )
    job_user = args.job_user or FLEET_JOB_USER.value(env) or None
    if not args.dry_run:
        for flag, name in (("--job-user", job_user), ("--user", None if job_user else args.user)):
            if name and not _exists(name):
                raise FleetError(
                    f"{flag} {name}: no such user; create it (useradd --system --home-dir "
                    f"/var/lib/{C.ENROLL_STATE_DIR} --shell /usr/sbin/nologin {name}) "
                    f"or name another with {flag}"
                )
    prefix = str(Path(args.prefix).resolve()) if args.prefix else None
    unit_path = Path(args.unit_dir or enroll.placed(prefix, C.ENROLL_UNIT_DIR)) / C.ENROLL_UNIT_NAME
    env_path = Path(args.env_file or enroll.placed(prefix, C.ENROLL_ENV_FILE))
    from core.constants import KILL_GRACE_S

    plan = enroll.UnitPlan(
        celery=str(Path(sys.executable).parent / "celery"),
        code_dir=str(Path(celeryconfig.__file__).resolve().parent),
        env_file=str(env_path.absolute()),
        user=args.user,
        job_user=job_user,
        work_dir=args.work_dir,
        gpu=gpu,
        stop_timeout_s=enroll.stop_timeout_s(
            celeryconfig.worker_soft_shutdown_timeout, KILL_GRACE_S + 2.0, args.upload_allowance
        ),
        writable=(store_url.path,) if store_url.scheme == "file" else (),
        yield_to_owner=YieldSettings.from_env(values).enabled,
    )
    unit = enroll.render_unit(plan)
    script_path = Path(args.wsl_script or enroll.placed(prefix, C.ENROLL_WSL_SCRIPT))
    if args.dry_run:
        print(
            f"# {unit_path}\n{unit}\n# {env_path} (mode 0600; secrets hidden here)\n"
            f"{enroll.render_env(values, mask=_mask)}",
            end="",
        )
        if task:
            print(f"# {script_path}\n{task[0]}", end="")
        return 0
    _write(env_path, enroll.render_env(values), 0o600)
    _write(unit_path, unit, 0o644)
    console.print(f"wrote {unit_path} and {env_path} (mode 0600)")
    console.print(
        f"next: systemctl daemon-reload && systemctl enable --now {C.ENROLL_UNIT_NAME}",
    )
    if task:
        _wsl_written(script_path, *task)
    return 0


def _wsl_written(path: Path, script: str, distro: str) -> None:
    from fleet.wsl import windows_path

    _write(path, script, 0o644)
    console.print(
        f"wrote {path}: in Windows, in an elevated PowerShell, run once\n"
        f"  powershell -ExecutionPolicy Bypass -File {windows_path(distro, str(path.absolute()))}",
        soft_wrap=True,
    )


def register(sub) -> None:
    s = sub.add_parser(
        "enroll", help="check this host, then write its systemd unit and settings file"
    )
    s.add_argument(
        "--dry-run",
        "--print",
        dest="dry_run",
        action="store_true",
        help="check and print the unit and settings (secrets hidden); write nothing",
    )
    s.add_argument(
        "--prefix", help="write under this directory instead of / (the unit names those paths)"
    )
    s.add_argument("--unit-dir", help=f"where the unit goes (default {C.ENROLL_UNIT_DIR})")
    s.add_argument("--env-file", help=f"the settings file (default {C.ENROLL_ENV_FILE})")
    s.add_argument("--user", default="fleet", help="the account the worker runs as (default fleet)")
    s.add_argument(
        "--job-user",
        help="run jobs as this user (the worker then runs as root); default FLEET_JOB_USER",
    )
    s.add_argument(
        "--work-dir",
        help=f"FLEET_WORK_DIR (default /var/lib/{C.ENROLL_STATE_DIR}, a StateDirectory)",
    )
    s.add_argument(
        "--upload-allowance",
        type=float,
        default=C.ENROLL_UPLOAD_ALLOWANCE_S,
        help="seconds added to the stop timeout for an upload in flight (default %(default)s)",
    )
    s.add_argument(
        "--skip-checks", action="store_true", help="do not check Redis, the store or the queues"
    )
    y = s.add_argument_group("yielding to the host's owner (docs/yielding.md)")
    y.add_argument(
        "--yield",
        dest="yield_to_owner",
        action="store_true",
        help="give the GPUs back whenever the owner uses them (FLEET_YIELD=1; default off)",
    )
    y.add_argument(
        "--yield-check",
        metavar="COMMAND",
        help="the owner is busy while COMMAND exits 0, e.g. 'pgrep -x steam' (run without a shell; "
        "implies --yield)",
    )
    y.add_argument(
        "--yield-idle-hint",
        action="store_true",
        help="also yield while a local graphical session is not idle (logind; implies --yield)",
    )
    y.add_argument(
        "--yield-reclaim-s",
        type=float,
        metavar="S",
        help=(
            "seconds a GPU must be left alone before work is taken again "
            f"(default {YIELD_RECLAIM_S:g})"
        ),
    )
    y.add_argument(
        "--yield-poll-s",
        type=float,
        metavar="S",
        help=f"how often the owner's activity is looked at (default {YIELD_POLL_S:g})",
    )
    s.add_argument(
        "--wsl",
        action="store_true",
        help="inside a WSL2 distribution: also write a PowerShell script that registers a Windows "
        "Scheduled Task starting this worker",
    )
    s.add_argument(
        "--wsl-trigger",
        choices=("logon", "boot"),
        default="logon",
        help="with --wsl: start at the owner's logon (default) or at boot, before anyone logs on",
    )
    s.add_argument(
        "--wsl-windows-user",
        metavar="NAME",
        help="with --wsl and logon: whose logon (default: anyone's)",
    )
    s.add_argument(
        "--wsl-script",
        metavar="PATH",
        help=f"with --wsl: where the script goes (default {C.ENROLL_WSL_SCRIPT})",
    )
    s.set_defaults(fn=cmd_enroll)
