"""A job's own Python environment, built once per host with uv and reused by digest.

An environment is defined by what it installs (requirement lines, or a project's
``pyproject.toml`` + ``uv.lock``), the Python version asked for and the host's platform;
its digest names its folder under ``<FLEET_WORK_DIR>/envs/``. Builds are safe to race and
to interrupt:

* one build per digest at a time, across threads and worker processes (``flock`` on
  ``locks/<digest>.build``); the others wait for that build, never for the jobs running in a
  ready environment, and then reuse it;
* a build goes into ``tmp/`` and is renamed into place with a ``.complete`` marker last, so a
  killed build leaves nothing a later job would use (its leftovers are removed by the next
  build of that digest);
* the cache is bounded (``FLEET_ENV_CACHE_GIB``): least recently used first, never one a
  running job holds (a shared lock while it runs).

uv reads its own settings from the worker's environment (``UV_INDEX_URL``,
``UV_EXTRA_INDEX_URL``, ``UV_FIND_LINKS``, ``UV_OFFLINE``, ``UV_TORCH_BACKEND`` ...): a mirror,
an internal index or a folder of wheels reach it unchanged. Their values are never logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import FleetError
from core.ids import short_id

COMPLETE = ".complete"  # written last: an environment without it was never finished
BUILD_TIMEOUT_S = 3600.0
# uv's messages that mean the job's own requirements are wrong: retrying elsewhere cannot help
JOB_ERRORS = (
    "No solution found",
    "not found in the package registry",
    "were not found in",
    "Because ",
    "is not a valid",
    "Failed to parse",
    "No matching distribution",
    "requires Python",
    "No interpreter found",
    "lockfile",
    "uv.lock",
    "needs to be updated",
)
UV_ENV_PREFIXES = (
    "UV_",
    "PIP_INDEX",
    "PIP_EXTRA_INDEX",
    "PIP_FIND_LINKS",
    "SSL_CERT",
    "REQUESTS_CA",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)


class EnvBuildFailed(FleetError):
    """Raised when uv cannot build a job's environment; ``permanent`` when the job's own
    requirements are at fault (no such package, conflicting pins), not the network."""

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class EnvSpec:
    """What defines a job's environment."""

    requirements: tuple[str, ...] = ()  # requirement lines (a requirements file's, read)
    lock: str | None = None  # sha256 of pyproject.toml + uv.lock in the workdir
    python: str | None = None  # "3.12"; None: the worker's own version

    def digest(self, platform_tag: str | None = None) -> str:
        body = {
            "requirements": list(self.requirements),
            "lock": self.lock,
            "python": self.python or _own_python(),
            "platform": platform_tag or host_platform(),
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _own_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def host_platform() -> str:
    return f"{sys.platform}-{platform.machine()}-{platform.libc_ver()[0] or 'nolibc'}"


def lock_digest(workdir: Path) -> str | None:
    """The digest of a project's pyproject.toml + uv.lock, or None when either is missing."""
    files = [workdir / "pyproject.toml", workdir / "uv.lock"]
    if not all(f.is_file() for f in files):
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def uv_binary() -> str:
    """The uv that ships as a worker dependency, else one on PATH."""
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError) as e:
        found = shutil.which("uv")
        if not found:
            raise EnvBuildFailed(
                "uv is not installed on this worker; install fleet's worker "
                "dependencies (pip install fleet) or put uv on PATH",
                permanent=False,
            ) from e
        return found


def uv_environment(env: Mapping[str, str], cache_dir: Path) -> dict[str, str]:
    """What uv runs with.

    PATH and HOME, uv's and the index settings, nothing else of the worker's.
    """
    keep = {
        k: v
        for k, v in env.items()
        if k.startswith(UV_ENV_PREFIXES) or k in ("PATH", "HOME", "LANG")
    }
    # the worker's own UV_CACHE_DIR wins: hosts that share a disk (a local fleet's simulated
    # hosts) share one cache, and uv hard-links each environment's files from it
    keep.setdefault("UV_CACHE_DIR", str(cache_dir))
    keep.setdefault("UV_PYTHON_DOWNLOADS", "never")  # a worker never fetches interpreters unasked
    return keep


class EnvCache:
    """Environments under ``root``: ``envs/<digest>``, ``tmp/``, ``locks/``, ``uv-cache/``."""

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        *,
        env: Mapping[str, str] | None = None,
        uv: str | None = None,
    ):
        self.root, self.max_bytes = Path(root), max_bytes
        self.env = os.environ if env is None else env
        self._uv = uv
        for sub in ("envs", "tmp", "locks", "uv-cache"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        return self.root / "envs" / digest

    def python(self, digest: str) -> Path:
        return self.path(digest) / "bin" / "python"

    def ready(self, digest: str) -> bool:
        return (self.path(digest) / COMPLETE).is_file()

    @contextlib.contextmanager
    def _lock(self, digest: str, mode: int, kind: str = "lock") -> Iterator[None]:
        with open(self.root / "locks" / f"{digest}.{kind}", "a+") as f:
            fcntl.flock(f, mode)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def use(
        self,
        spec: EnvSpec,
        *,
        workdir: Path | None = None,
        log: Callable[[str], None] = lambda line: None,
    ) -> Iterator[Path]:
        """The environment's python, built if needed, held (not evicted) inside the block.

        Two locks per digest: ``<digest>.lock``, held shared by every job that uses the
        environment, for its whole run (eviction takes it exclusive, without waiting); and
        ``<digest>.build``, held exclusive only while one process builds it. A job that finds
        the environment ready takes no exclusive lock at all, so any number of jobs share one
        environment at once; one that finds it missing waits for the build, not for the
        jobs running in it."""
        digest = spec.digest()
        with self._lock(digest, fcntl.LOCK_SH):  # from here on it cannot be evicted
            if self.ready(digest):
                log(f"environment {short_id(digest)} cached")
            else:
                with self._lock(digest, fcntl.LOCK_EX, kind="build"):
                    if self.ready(digest):  # another job built it while this one waited
                        log(f"environment {short_id(digest)} cached")
                    else:
                        self._build(spec, digest, workdir, log)
                        self.evict(keep=digest)  # room for the new one, never itself
            os.utime(self.path(digest) / COMPLETE)  # recently used: evicted last
            yield self.python(digest)
        self.evict()

    def _build(
        self, spec: EnvSpec, digest: str, workdir: Path | None, log: Callable[[str], None]
    ) -> None:
        for old in (self.root / "tmp").glob(f"{digest}-*"):
            shutil.rmtree(old, ignore_errors=True)  # an interrupted build's leftovers
        tmp = self.root / "tmp" / f"{digest}-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        log(f"building environment {short_id(digest)} with uv")
        try:
            self._uv_run(
                ["venv", "--relocatable", "--python", spec.python or sys.executable, str(tmp)], log
            )
            if spec.lock is not None:
                self._sync(tmp, workdir, log)
            else:
                req = tmp / "fleet-requirements.txt"
                req.write_text("".join(line + "\n" for line in spec.requirements))
                self._uv_run(
                    ["pip", "install", "--python", str(tmp / "bin" / "python"), "-r", str(req)], log
                )
            _inherit_worker_packages(tmp, spec)
            (tmp / COMPLETE).write_text(
                json.dumps(
                    {
                        "spec": spec.__dict__ | {"requirements": list(spec.requirements)},
                        "built_s": round(time.monotonic() - started, 2),
                        "bytes": _du(tmp),
                    }
                )
            )
            shutil.rmtree(self.path(digest), ignore_errors=True)
            os.rename(tmp, self.path(digest))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log(f"environment {short_id(digest)} built in {time.monotonic() - started:.1f} s")

    def _sync(self, target: Path, workdir: Path | None, log: Callable[[str], None]) -> None:
        if workdir is None:
            raise EnvBuildFailed("a uv.lock environment needs the job's workdir", permanent=True)
        self._uv_run(
            ["sync", "--frozen", "--no-install-project", "--project", str(workdir)],
            log,
            extra={"UV_PROJECT_ENVIRONMENT": str(target)},
        )

    def _uv_run(
        self, args: list[str], log: Callable[[str], None], extra: Mapping[str, str] = {}
    ) -> None:
        env = uv_environment(self.env, self.root / "uv-cache") | dict(extra)
        cmd = [self._uv or uv_binary(), *args]
        try:
            proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
        except OSError as e:
            raise EnvBuildFailed(f"cannot run uv ({e.strerror})", permanent=False) from e
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            log(lines[-1])
        if proc.wait(timeout=BUILD_TIMEOUT_S) != 0:
            raise _failure(lines, proc.returncode)

    def sizes(self) -> dict[str, int]:
        """Each finished environment's bytes on disk, by digest."""
        return {p.name: _du(p) for p in (self.root / "envs").iterdir() if (p / COMPLETE).is_file()}

    def listing(self) -> list[dict]:
        """Each finished environment, cheaply (its marker only).

        Its digest, bytes, build time and last use.
        """
        out = []
        for p in sorted((self.root / "envs").iterdir()):
            try:
                marker = json.loads((p / COMPLETE).read_text())
                used = (p / COMPLETE).stat().st_mtime
            except (OSError, ValueError):
                continue
            out.append(
                {
                    "digest": short_id(p.name),
                    "bytes": marker.get("bytes"),
                    "built_s": marker.get("built_s"),
                    "used_at": round(used),
                }
            )
        return out

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove least recently used environments until the cache fits its bound."""
        envs = sorted(
            ((p / COMPLETE).stat().st_mtime, p.name, _du(p))
            for p in (self.root / "envs").iterdir()
            if (p / COMPLETE).is_file()
        )
        total = sum(size for _, _, size in envs)
        gone = []
        for _, digest, size in envs:
            if total <= self.max_bytes:
                break
            if digest == keep or not self._try_remove(digest):
                continue
            total -= size
            gone.append(digest)
        return gone

    def _try_remove(self, digest: str) -> bool:
        with open(self.root / "locks" / f"{digest}.lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a job is using it
            try:
                (self.path(digest) / COMPLETE).unlink(missing_ok=True)  # unusable before it is gone
                shutil.rmtree(self.path(digest), ignore_errors=True)
                return True
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


WORKER_PTH = "fleet-worker-packages.pth"


def _inherit_worker_packages(env_dir: Path, spec: EnvSpec) -> None:
    """Let the worker's packages (numpy, torch: too big to install per job) be imported
    beneath the job's own: a .pth appends the worker's site-packages after the env's, so
    a requirement the job pins wins. Only for the worker's own Python version."""
    if spec.python not in (None, _own_python()):
        return
    import sysconfig

    paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    for site in env_dir.glob("lib/python*/site-packages"):
        (site / WORKER_PTH).write_text("".join(p + "\n" for p in paths))


def _failure(lines: list[str], status: int) -> EnvBuildFailed:
    errors = [ln.strip() for ln in lines if ln.strip()]
    first = next((ln for ln in errors if ln.lower().startswith(("error", "×", "x "))), None)
    reason = first or (errors[-1] if errors else f"uv exited with status {status}")
    text = "\n".join(errors)
    permanent = any(marker in text for marker in JOB_ERRORS)
    cause = next((ln for ln in errors if "Because " in ln and ln != reason), None)
    detail = f"{reason} ({cause.removeprefix('cause: ')})" if cause else reason
    return EnvBuildFailed(f"environment build failed: {detail}", permanent=permanent)


def _du(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
