"""A throwaway unprivileged account to run jobs as (FLEET_JOB_USER), and a folder it reaches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest


@pytest.fixture
def job_user():
    """The name of a new system user, removed afterwards; skips where none can be made."""
    if os.geteuid() != 0:
        pytest.skip(f"FLEET_JOB_USER needs a root worker; this test runs as uid {os.geteuid()}")
    if not shutil.which("useradd"):
        pytest.skip("useradd is not installed: cannot make a job user")
    name = f"fjob{uuid.uuid4().hex[:6]}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", name], check=True
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def reachable_dir() -> Path:
    """A new folder a job user may enter and write to (pytest's tmp is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="fleet-jobuser-"))
    path.chmod(0o777)
    return path


def system_python() -> str:
    """A Python a job user can run (this one may live under /root)."""
    return shutil.which("python3", path=os.defpath) or sys.executable
