"""A job's own code and Python environment on the worker: its workdir copied in as its
working directory, its environment built once per host (``artifacts.pyenv``) and held.

``prepared`` is what ``tasks.execution`` calls around the job's process. A job without a
workdir, requirements or a uv.lock runs in an empty directory with the worker's Python,
as before. While an environment builds, the record's progress says so ("preparing
environment 3f2a1b.., 14 s", read by `fleet status`, `fleet show` and Flower) and uv's
output goes to `fleet logs`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from artifacts.data import fetch
from artifacts.pyenv import EnvBuildFailed, EnvCache, EnvSpec
from core.constants import DATA_CACHE_DIR, ENV_CACHE_DIR
from core.errors import FleetError
from core.ids import short_id
from manifest import dataref
from manifest.schema import JobSpec
from tasks.retry import Backoff, retry

log = logging.getLogger("fleet.workspace")
# a network failure while building is retried like a store outage, then the attempt fails
ENV_BACKOFF = Backoff((5, 15, 30, 60), tries=5)
TORCH_BACKEND_ENV = "UV_TORCH_BACKEND"
PYTHON_WORDS = ("python", "python3")
FLEET_ROOT = Path(__file__).resolve().parent.parent  # built-in trainers import from here


class JobEnvFailed(FleetError):
    """Raised when a job's environment cannot be built for the job's own reasons (no such
    package, conflicting pins): retrying on another host cannot help."""


def copy_workdir(payload: Path, work: Path) -> int:
    """Copy the cached (read-only) workdir into the job's directory, writable; files copied."""
    n = 0
    for src in sorted(payload.rglob("*")):
        dest = work / src.relative_to(payload)
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        dest.chmod(stat.S_IMODE(src.stat().st_mode) | stat.S_IWUSR)
        n += 1
    return n


def env_cache(ctx) -> EnvCache:
    """This host's environments, uv told to pick a torch matching the driver on a GPU host."""
    env = dict(os.environ)
    if ctx.capability.cuda_devices and not env.get(TORCH_BACKEND_ENV):
        env[TORCH_BACKEND_ENV] = "auto"
    return EnvCache(ctx.work_root / ENV_CACHE_DIR, ctx.settings.env_cache_bytes, env=env)


def cached_envs(work_root: Path) -> list[dict]:
    """The environments this host holds, for its heartbeat (``fleet hosts --json``)."""
    root = Path(work_root) / ENV_CACHE_DIR / "envs"
    if not root.is_dir():
        return []
    return EnvCache(root.parent, 0).listing()


def job_variables(job: JobSpec, ctx) -> dict[str, str]:
    """The job's own ``env`` and the worker variables its host lets through (``pass_env``)."""
    policy = ctx.config.policy(ctx.hostname)
    passed = {
        name: os.environ[name] for name in (policy.pass_env if policy else ()) if name in os.environ
    }
    return {**job.env, **passed}


def adapt(argv: list[str], env: dict[str, str], job: JobSpec, python: Path | None) -> list[str]:
    """The job's argv and variables with the environment's python in place of the worker's."""
    if python is None:
        return argv
    bin_dir = str(python.parent)
    env.update(
        VIRTUAL_ENV=str(python.parent.parent),
        PATH=bin_dir + os.pathsep + env.get("PATH", os.defpath),
    )
    if job.command is None:  # a built-in trainer: its code is fleet's
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(FLEET_ROOT), env.get("PYTHONPATH")) if p
        )
        return [str(python), *argv[1:]]
    return [str(python), *argv[1:]] if argv and argv[0] in PYTHON_WORDS else argv


@contextlib.contextmanager
def prepared(task, ctx, run) -> Iterator[Path | None]:
    """Put the job's workdir in ``run.work`` and hold its environment; the env's python, or
    None for the worker's. Raises JobEnvFailed (fail now) or EnvBuildFailed (network)."""
    job = run.job
    if job.workdir:
        payload = fetch(
            job.workdir,
            ctx.work_root / DATA_CACHE_DIR,
            store_factory=ctx.open_store,
            cache_bytes=ctx.settings.data_cache_bytes,
        )
        log.info(
            "%s: workdir %s copied (%d files)",
            job.name,
            short_id(dataref.parse(job.workdir).sha256),
            copy_workdir(payload, run.work),
        )
    if not job.own_env:
        yield None
        return
    spec = EnvSpec(job.requirements, job.env_lock, job.python)
    with contextlib.ExitStack() as stack:
        python = _hold_env(task, ctx, run, spec, stack)
        yield python


def _hold_env(task, ctx, run, spec: EnvSpec, stack: contextlib.ExitStack) -> Path:
    cache = env_cache(ctx)
    digest = spec.digest()
    with _preparing(task, ctx, run, digest):

        def enter() -> Path:
            try:
                return stack.enter_context(cache.use(spec, workdir=run.work, log=run.output.append))
            except EnvBuildFailed as e:
                if e.permanent:
                    raise JobEnvFailed(str(e)) from e
                raise

        return retry(
            enter,
            on=EnvBuildFailed,
            backoff=ENV_BACKOFF,
            stop=ctx.shutdown,
            what=f"environment {short_id(digest)}",
        )


@contextlib.contextmanager
def _preparing(task, ctx, run, digest: str) -> Iterator[None]:
    """Say once a second, through the lease and Flower, that the environment is being prepared."""
    done, started = threading.Event(), time.monotonic()

    def tick() -> None:
        while not done.wait(1.0):
            elapsed = time.monotonic() - started
            snap = {
                "elapsed_s": round(elapsed, 1),
                "metrics": {},
                "tail": [f"preparing environment {short_id(digest)}.., {elapsed:.0f} s"],
            }
            run.lease.report(progress=snap)
            with contextlib.suppress(Exception):  # the result backend is down: best effort
                task.update_state(
                    state="PROGRESS",
                    meta={
                        "job_id": run.job.job_id,
                        "name": run.job.name,
                        "worker": ctx.hostname,
                        **snap,
                    },
                )

    ticker = threading.Thread(target=tick, name=f"preparing-{short_id(digest)}", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join(2)
