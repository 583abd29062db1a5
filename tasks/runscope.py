"""Every process of one run, in any session, found and killed together.

A job's processes need not stay in its process group: ``setsid`` daemons, torchrun's ranks
(a session each) and double-forked helpers leave it, and are re-parented away from the job.
Two ways find them all, whichever the host offers:

* **a cgroup v2 of the run's own** (``fleet-run-<mark>`` under the worker's own cgroup), where
  the worker may make one: the kernel keeps every descendant in it, whatever it does;
  ``cgroup.kill`` ends them all and an empty ``cgroup.procs`` says none is left;
* **a mark**, ``FLEET_RUN_SCOPE=<mark>`` in the job's environment, which every descendant
  inherits unless it clears its environment: a scan of ``/proc/PID/environ`` (readable for
  the same uid, and for root) finds them, with their descendants by parent, and kills them
  until a scan finds none (a process may fork while it is killed).

Both are used where the cgroup exists; the scan alone elsewhere (docs/limits.md says which).
A process that was killed counts until it is a zombie: a CUDA process lets its GPU go only
on its way out, after its environment is already unreadable.

Standard library only, and loaded by path by the job's supervisor (tasks/supervisor.py), which
may run on a job user's older system Python: no fleet import, nothing newer than 3.8.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "FLEET_RUN_SCOPE"  # the run's mark, in every process of the job
CGROUP_ENV = "FLEET_RUN_CGROUP"  # the run's cgroup, for the supervisor (absent: none)
CGROUP_PREFIX = "fleet-run-"
POLL_S = 0.05
END_TIMEOUT_S = 10.0  # how long killing a run's processes may take before it is called failed
GONE = frozenset("ZX")  # /proc states of a process that holds nothing any more


class Proc:
    """One process in a /proc snapshot."""

    __slots__ = ("ppid", "state", "start", "marked")

    def __init__(self, ppid: int, state: str, start: int, marked: bool):
        self.ppid, self.state, self.start, self.marked = ppid, state, start, marked

    def __repr__(self) -> str:
        return f"Proc({self.ppid}, {self.state!r}, {self.start}, {self.marked})"


def of_run(procs: dict, seen: set) -> set:
    """The pids of the run in a snapshot (pid -> Proc): those marked, those killed before
    (``seen``: (pid, start) pairs, so a reused pid is not taken for one), and their
    descendants by parent, a process that cleared its environment included."""
    ours = {p for p, proc in procs.items() if proc.marked or (p, proc.start) in seen}
    children: dict = {}
    for p, proc in procs.items():
        children.setdefault(proc.ppid, []).append(p)
    todo = list(ours)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return ours


def doomed(procs: dict, seen: set, spare: frozenset = frozenset()) -> set:
    """The pids of the run still to kill, or to wait for: of the run, not yet a zombie, and
    not in ``spare`` (the caller itself)."""
    return {p for p in of_run(procs, seen) if procs[p].state not in GONE and p not in spare}


def snapshot(mark: str) -> dict:
    """Every process this one can see: pid -> Proc, marked when its environment holds the
    run's mark. One whose environment cannot be read (another uid, a zombie) is unmarked."""
    needle = f"{ENV}={mark}".encode()
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        procs[int(name)] = Proc(int(fields[1]), fields[0].decode(), int(fields[19]), False)
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                procs[int(name)].marked = needle in f.read().split(b"\0")
        except OSError:
            pass
    return procs


def scope_of(pid: int) -> str | None:
    """The run ``pid`` belongs to, by its cgroup (readable by anyone) or else its mark; None
    for a process of no run, or one gone."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for part in f.read().replace("\n", "/").split("/"):
                if part.startswith(CGROUP_PREFIX):
                    return part[len(CGROUP_PREFIX) :]
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(ENV.encode() + b"="):
                    return entry.split(b"=", 1)[1].decode(errors="replace")
    except OSError:
        pass
    return None


def kill_marked(mark: str, spare: frozenset, deadline: float) -> list:
    """SIGKILL every process of the run (the mark) until a scan finds none alive; the pids
    still alive at ``deadline`` (a process of another uid, say), else []."""
    seen: set = set()
    while True:
        procs = snapshot(mark)
        left = doomed(procs, seen, spare)
        if not left:
            return []
        for pid in left:
            seen.add((pid, procs[pid].start))
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # gone, or not ours to kill: the deadline says so
        if time.monotonic() > deadline:
            return sorted(left)
        time.sleep(POLL_S)


# --- the run's cgroup ----------------------------------------------------------------


def own_cgroup() -> str | None:
    """This process's cgroup v2 directory, or None where there is no cgroup2 mount."""
    mount = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    mount = left.split()[4]
                    break
        with open("/proc/self/cgroup") as f:
            path = next((ln[3:].strip() for ln in f if ln.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or path is None:
        return None
    where = os.path.join(mount, path.lstrip("/"))
    return where if os.path.isdir(where) else None  # "(deleted)", or another namespace's


def cgroup_of(mark: str, base: str | None = None) -> str | None:
    """Where the run's cgroup is (under ``base``, default this process's cgroup), if it is."""
    base = own_cgroup() if base is None else base
    path = base and os.path.join(base, CGROUP_PREFIX + mark)
    return path if path and os.path.isdir(path) else None


def make_cgroup(mark: str) -> tuple:
    """A new cgroup for the run under this process's own: (its path, None), or (None, why
    not) where the host lets this process make none."""
    base = own_cgroup()
    if base is None:
        return None, "no cgroup v2 hierarchy is mounted"
    path = os.path.join(base, CGROUP_PREFIX + mark)
    try:
        os.mkdir(path)
    except OSError as e:
        return None, f"cannot make {path}: {e.strerror}"
    return path, None


def enter(cgroup: str, pid: int) -> None:
    """Move ``pid`` into the run's cgroup (OSError if it cannot be moved)."""
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(pid))


def members(cgroup: str) -> list:
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def kill_cgroup(cgroup: str, deadline: float) -> list:
    """SIGKILL every process in the cgroup until it is empty, then remove it; the pids
    still in it at ``deadline``, else []."""
    while True:
        pids = members(cgroup)
        if not pids:
            try:
                os.rmdir(cgroup)
            except FileNotFoundError:
                pass
            except OSError:  # a process entered since: look again
                if time.monotonic() <= deadline:
                    time.sleep(POLL_S)
                    continue
            return []
        try:  # Linux 5.14+: the whole cgroup at once, a forking process included
            with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if time.monotonic() > deadline:
            return pids
        time.sleep(POLL_S)


def end(
    mark: str,
    cgroup: str | None,
    *,
    spare: frozenset = frozenset(),
    grace_s: float = 0.0,
    timeout_s: float = END_TIMEOUT_S,
) -> list:
    """Kill every process of the run, by its cgroup and by its mark, and wait until none is
    left; the pids still alive after ``timeout_s`` (none: []). ``grace_s``: first wait this
    long for the run to end on its own (its supervisor is still stopping it)."""
    spare = spare | {os.getpid()}
    end_by = time.monotonic() + grace_s
    while time.monotonic() < end_by and (
        (cgroup and members(cgroup)) or doomed(snapshot(mark), set(), spare)
    ):
        time.sleep(POLL_S)
    deadline = time.monotonic() + timeout_s
    left = kill_cgroup(cgroup, deadline) if cgroup else []
    return sorted(set(left) | set(kill_marked(mark, spare, deadline)))
