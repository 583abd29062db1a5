"""Flower stops on SIGTERM wherever its main thread is: with Flower's own handler, a SIGTERM
handled inside a finalizer is swallowed ("Exception ignored in") and Flower runs on (a
whole-suite run left one retrying a gone broker for minutes); fleet's stops its IOLoop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Flower's command as it runs: its SIGTERM handler installed, its IOLoop started; the signal
# comes while the main thread runs a weakref callback (a finalizer)
FLOWER_LIKE = """
import os, signal, sys, threading, weakref
from tornado.ioloop import IOLoop
import flower.command
if sys.argv[1] == "fleet":
    from fleet import flower_extras
    flower_extras._install_stop()
signal.signal(signal.SIGTERM, flower.command.sigterm_handler)
loop = IOLoop.current()

class Obj:
    pass

def finalizer(_):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10_000):  # the handler runs here, inside the callback
        pass

def collect():
    o = Obj()
    ref = weakref.ref(o, finalizer)
    del o

def still_running():
    print("still running", flush=True)
    os._exit(3)

watchdog = threading.Timer(3.0, still_running)
watchdog.daemon = True
watchdog.start()
loop.add_callback(collect)
try:
    loop.start()
except SystemExit:
    pass
print("stopped", flush=True)
"""


def run(handler: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", FLOWER_LIKE, handler],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_flowers_own_handler_loses_a_sigterm_taken_in_a_finalizer():
    pytest.importorskip("flower")
    got = run("flower")
    assert "still running" in got.stdout and got.returncode == 3, got
    assert "Exception ignored" in got.stderr


def test_fleets_handler_stops_flower_on_a_sigterm_taken_in_a_finalizer():
    pytest.importorskip("flower")
    got = run("fleet")
    assert got.stdout.strip() == "stopped" and got.returncode == 0, got
