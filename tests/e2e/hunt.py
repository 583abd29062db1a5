"""A job that hunts for its worker's secrets: ``python hunt.py REVERSED_NEEDLE``.

Reports what it could read, never the secret itself: for each place, the text it got
(environ files, its own env) or, for the worker's memory, whether the needle is there.
"""

import json
import os
import pathlib
import sys


def read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace").replace("\0", "\n")
    except OSError as e:
        return f"<{type(e).__name__}>"


def scan_memory(pid: int, needle: bytes) -> str:
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        with open(f"/proc/{pid}/mem", "rb", 0) as mem:
            for line in maps:
                addr, perms = line.split()[:2]
                if not perms.startswith("rw"):
                    continue
                start, end = (int(x, 16) for x in addr.split("-"))
                try:
                    mem.seek(start)
                    if needle in mem.read(end - start):
                        return "found"
                except (OSError, ValueError, OverflowError):
                    continue
    except OSError as e:
        return f"<{type(e).__name__}>"
    return "not found"


def watchman_of(worker: int) -> int:
    """The worker's watchman (tasks/watchman.py): its child running that script; 0 if none."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        stat = read(f"/proc/{pid}/stat")
        if ")" in stat and stat.rsplit(")", 1)[1].split()[1] == str(worker):
            if "watchman.py" in read(f"/proc/{pid}/cmdline"):
                return int(pid)
    return 0


needle = sys.argv[1][::-1].encode()
supervisor = os.getppid()
worker = int(read(f"/proc/{supervisor}/stat").rsplit(")", 1)[1].split()[1])
watchman = watchman_of(worker)
found = {
    "uid": os.getuid(),
    "worker_pid": worker,
    "own_env": "\n".join(f"{k}={v}" for k, v in os.environ.items()),
    "supervisor_environ": read(f"/proc/{supervisor}/environ"),
    "worker_environ": read(f"/proc/{worker}/environ"),
    "worker_cmdline": read(f"/proc/{worker}/cmdline"),
    "worker_memory": scan_memory(worker, needle),
    "watchman_pid": watchman,
    "watchman_environ": read(f"/proc/{watchman}/environ"),
    "watchman_cmdline": read(f"/proc/{watchman}/cmdline"),
    "watchman_memory": scan_memory(watchman, needle),
}
print(json.dumps(found))
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/found.json").write_text(json.dumps(found))
