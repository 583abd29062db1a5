"""Every verb that needs Redis answers within about a second when nothing listens on the
broker's port, and names the command that keeps a local fleet running."""

import time

import pytest

from fleet import cli
from fleet.redis_server import free_port

pytestmark = pytest.mark.integration
REFUSED_WITHIN_S = 1.5  # connection refused is instant; the rest is the verb's own start-up

MANIFEST = """
[[jobs]]
name = "offline"
command = ["true"]
"""


@pytest.fixture
def closed_port_cli():
    app = cli.app()
    before = app.conf.broker_url
    app.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"
    app.pool.force_close_all()
    yield cli.main
    app.conf.broker_url = before
    app.pool.force_close_all()


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["hosts"],
        ["why", "abcd1234"],
        ["logs", "abcd1234"],
        ["show", "abcd1234"],
        ["cancel", "abcd1234"],
        ["requeue", "abcd1234"],
        ["dead-letter"],
        ["publish", "{manifest}"],
    ],
)
def test_a_verb_against_a_closed_port_fails_within_a_second_with_a_hint_that_works(
    closed_port_cli, argv, tmp_path, capsys
):
    path = tmp_path / "m.toml"
    path.write_text(MANIFEST)
    t0 = time.monotonic()
    rc = closed_port_cli([a.replace("{manifest}", str(path)) for a in argv])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 1 and took < REFUSED_WITHIN_S, (took, err)
    assert "cannot reach Redis" in err and "fleet local --keep" in err


def test_a_dry_run_against_a_closed_port_still_plans_at_once(closed_port_cli, tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MANIFEST)
    t0 = time.monotonic()
    assert closed_port_cli(["publish", str(path), "--dry-run"]) == 0
    assert time.monotonic() - t0 < REFUSED_WITHIN_S
    out = capsys.readouterr()
    assert "the plan below assumes no job was published before" in out.err and "offline" in out.out


def test_a_silent_host_times_out_and_says_it_was_silent(capsys):
    import socket

    from fleet.cli import common

    # a listening socket that never accepts: the connection is made but no reply ever comes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(0)
        app = cli.app()
        before = app.conf.broker_url
        app.conf.broker_url = f"redis://127.0.0.1:{s.getsockname()[1]}/0"
        old = common.CONNECT_TIMEOUT_S
        common.CONNECT_TIMEOUT_S = 0.5
        try:
            t0 = time.monotonic()
            assert cli.main(["status"]) == 1
            assert time.monotonic() - t0 >= 0.5
        finally:
            common.CONNECT_TIMEOUT_S = old
            app.conf.broker_url = before
            app.pool.force_close_all()
    assert "no answer within 0.5 s" in capsys.readouterr().err


def test_capability_without_a_broker_says_why_it_shows_the_default_tiers(closed_port_cli, capsys):
    assert closed_port_cli(["capability"]) == 0
    out, err = capsys.readouterr()
    assert "cannot reach Redis at redis://127.0.0.1:" in err and "showing the default tiers" in err
    assert "queues:" in out
