"""The job of tests/harness/orphans.py: a setsid'd daemon and children in sessions of their
own, all ignoring SIGTERM, each writing its pid to the file named by argv[1]. With
``--rank PID_FILE``, one of torchrun's ranks instead: a SIGTERM handler that does not exit
(as Lightning's, or a rank stuck in a collective). Standard library only: it runs as a job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILDREN = 2  # tests/harness/orphans.py
RANK = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "with open(sys.argv[1], 'a') as f: f.write(f'{os.getpid()}\\n')\n"
    "while True: time.sleep(1)\n"
)


def _daemon(pid_file: str) -> None:
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(pid_file, "a") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        time.sleep(1)


def main(pid_file: str) -> None:
    _daemon(pid_file)
    for _ in range(CHILDREN):
        subprocess.Popen([sys.executable, "-c", RANK, pid_file], start_new_session=True)
    print("orphans started", flush=True)
    time.sleep(600)


def rank(pid_file: str) -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: print("rank: SIGTERM ignored", flush=True))
    with open(pid_file, "a") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    rank(sys.argv[2]) if sys.argv[1] == "--rank" else main(sys.argv[1])
