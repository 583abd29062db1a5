"""Keep the worker's secrets from its jobs, and optionally run jobs as another user.

A job is code the worker did not write. It must not see the broker password or the
store's keys: its output reaches records, Flower and error messages.

* ``job_environment``: the job's environment is the worker's minus anything secret, by
  name (``AWS_*``, ``*PASSWORD*``, broker and backend URLs, ...) and by value (a URL with
  a password, or any value containing a secret the worker holds).
* ``harden_worker``: the worker process is made non-dumpable (``PR_SET_DUMPABLE`` 0), so
  a job running as the same non-root user can neither read ``/proc/<worker>/environ`` or
  ``/mem`` nor ptrace it, and the secret values in the worker's initial environment block
  (what ``/proc/<worker>/environ`` shows) are overwritten in place. The worker keeps them
  in ``os.environ``, a copy that no other process can read.
* ``FLEET_JOB_USER``: a worker running as root starts each job's supervisor as that
  user (uid, gid and groups), with its work directory handed over. A job as root could
  still read the worker's memory; a different uid cannot.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from core.errors import ConfigError
from core.registry import FLEET_JOB_USER, FLEET_WORK_DIR
from core.secrets import is_secret, secret_values

PR_SET_DUMPABLE = 4


@dataclass(frozen=True)
class JobUser:
    """The account jobs run as (FLEET_JOB_USER)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    python: str = sys.executable  # runs the job's supervisor (standard library only)


def job_environment(env: Mapping[str, str], user: JobUser | None = None) -> dict[str, str]:
    """The worker's environment minus its secrets; a job user gets its own HOME and name."""
    secrets = secret_values(env)
    out = {k: v for k, v in env.items() if not is_secret(k, v, secrets)}
    if user is not None:
        out.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    return out


def harden_worker(env: Mapping[str, str] | None = None) -> None:
    """Make this process non-dumpable and blank the secrets in its initial environment."""
    env = os.environ if env is None else env
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return  # not Linux: nothing to do
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _blank_initial_environment(libc, secret_values(env))


def _blank_initial_environment(libc, secrets: set[str]) -> None:
    # /proc/<pid>/environ shows the bytes the kernel placed at exec; os.environ is a copy
    # Python made at start. Overwrite secret values in place, keeping lengths.
    environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    i = 0
    while environ[i]:
        addr = environ[i]
        key, _, value = ctypes.string_at(addr).partition(b"=")
        name, text = key.decode(errors="replace"), value.decode(errors="replace")
        if value and is_secret(name, text, secrets):
            ctypes.memset(addr + len(key) + 1, ord("*"), len(value))
        i += 1


def job_user(name: str) -> JobUser | None:
    """FLEET_JOB_USER (``WorkerSettings.job_user``) resolved, or None for ""; ConfigError if
    it cannot work on this host."""
    name = name.strip()
    if not name:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise ConfigError(
            f"{FLEET_JOB_USER.name}={name!r}: no such user on this host; create it "
            f"(useradd --system --create-home {name}) or unset {FLEET_JOB_USER.name}"
        ) from None
    if pw.pw_uid == 0:
        raise ConfigError(
            f"{FLEET_JOB_USER.name}={name!r} is root: jobs would keep every right of the worker; "
            "name an unprivileged user"
        )
    if os.geteuid() != 0:
        raise ConfigError(
            f"{FLEET_JOB_USER.name}={name!r} needs the worker to run as root to start jobs as "
            f"another user (it runs as uid {os.geteuid()}); unset it to run jobs as the "
            "worker's own user"
        )
    groups = tuple(sorted(set(os.getgrouplist(name, pw.pw_gid)) - {pw.pw_gid}))
    return JobUser(name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir)


def probe_job_user(user: JobUser, work_root: Path, supervisor: str) -> JobUser:
    """Start a no-op supervisor as the job user in the work root: refuse now what would fail
    every job later. The supervisor needs only the standard library, so when the worker's
    own Python is out of the user's reach (a venv under /root) a system python3 will do."""
    candidates = [sys.executable] + [p for p in [shutil.which("python3", path=os.defpath)] if p]
    errors = []
    for python in dict.fromkeys(candidates):
        try:
            res = subprocess.run(
                [python, supervisor, "--", "true"],
                cwd=work_root,
                env={"PATH": os.defpath},
                capture_output=True,
                text=True,
                timeout=30,
                **popen_user(user),
            )
        except (OSError, subprocess.SubprocessError) as e:
            errors.append(f"{python}: {getattr(e, 'strerror', None) or e}")
            continue
        if res.returncode == 0:
            return replace(user, python=python)
        errors.append(f"{python}: exit {res.returncode} {res.stderr.strip()[-200:]}")
    raise ConfigError(
        f"{FLEET_JOB_USER.name}={user.name!r} cannot start a job in "
        f"{FLEET_WORK_DIR.name}={str(work_root)!r} "
        f"({'; '.join(errors)}); make the work directory, fleet's code ({supervisor}) and a "
        f"Python readable and executable by {user.name}"
    )


def hand_over(workdir: Path, user: JobUser | None) -> None:
    """Give the job's work directory (and what the worker wrote in it) to the job user."""
    if user is None:
        return
    for root, _dirs, files in os.walk(workdir):
        for name in (root, *(os.path.join(root, n) for n in files)):
            os.lchown(name, user.uid, user.gid)


def popen_user(user: JobUser | None) -> dict:
    """Popen keyword arguments that start the job's supervisor as the job user."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}


__all__ = [
    "JobUser",
    "job_environment",
    "harden_worker",
    "job_user",
    "hand_over",
    "popen_user",
    "secret_values",
    "is_secret",
]
