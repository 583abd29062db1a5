"""A pipeline as plain values for `fleet status`, `fleet why`, `fleet status --tree` and Flower:
each follower's upstreams with their states now, and the graph of every pipeline.

I/O is two or three pipelined reads whatever the number of jobs: the followers' ``waits`` sets,
the upstream job records (through ``state.jobrecord``, their one reader) and the upstream
searches' hashes. Everything after the read is pure: ``Edge``, ``wait_note``, ``cancel_note``,
``Graph`` and ``tree_lines`` are tested by tables (tests/unit/test_pipeline_view.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from core.ids import short_id
from core.members import Kind, member, parse_member
from state.jobrecord import JobRecord, JobState, fetch_many

if TYPE_CHECKING:  # the readers import redis when called: `fleet status --help` loads none
    import redis

# a search's state as an upstream: its outcome once done (lua/search_sync.lua), else whether
# it waits for upstreams of its own or issues trials
SEARCH_RUNNING = "running"
SEARCH_FIELDS = ("name", "state", "outcome", "outcome_reason", "after")
UPSTREAM_FIELDS = ("name", "state", "end_reason", "last_error", "after", "search")
# the states an upstream ends a follower's wait in: success releases it, the others cancel it
SUCCESS = frozenset({JobState.SUCCEEDED.value, JobState.PRUNED.value})
FAILURE = frozenset({JobState.FAILED.value, JobState.CANCELLED.value})


@dataclass(frozen=True)
class Edge:
    """One upstream of a follower, as it stands now."""

    kind: str  # "job" or "search"
    id: str
    name: str
    state: str  # a job's state; a search's outcome, "running" or "waiting"
    reason: str = ""  # how it ended, one line (failed or cancelled)
    awaited: bool = False  # the follower still waits for it

    @property
    def member(self) -> str:
        return member(self.kind, self.id)

    def label(self) -> str:
        """``prep (running)``; a search says so: ``tune (search running)``."""
        what = f"search {self.state}" if self.kind == Kind.SEARCH.value else self.state
        return f"{self.name} ({what})"

    def to_dict(self) -> dict:
        return asdict(self)


def wait_note(edges: Sequence[Edge]) -> str:
    """What a waiting follower waits on, in one line: ``waits on prep (running), tune (search
    running)``; an upstream that failed (its cancel is on its way) is named first."""
    awaited = sorted((e for e in edges if e.awaited), key=lambda e: e.state not in FAILURE)
    if not awaited:
        return "waits on nothing now: its release is on its way"
    return "waits on " + ", ".join(e.label() for e in awaited)


def cancel_note(cancelled_by: dict | None) -> str:
    """Why a follower was cancelled, from its record's ``cancelled_by``: ``upstream prep
    failed: exit 1: ...`` ('' for a job no upstream cancelled)."""
    if not isinstance(cancelled_by, dict):
        return ""
    name = cancelled_by.get("name") or short_id(str(cancelled_by.get("id", "")))
    state = cancelled_by.get("state") or "ended"
    what = "was cancelled" if state == JobState.CANCELLED.value else state
    reason = cancelled_by.get("reason") or ""
    return f"upstream {name} {what}" + (f": {reason}" if reason else "")


def _after(raw) -> list[dict]:
    """A record's or search hash's ``after``: a list of {kind, id, name} (decoded or not)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    return [u for u in raw or [] if isinstance(u, dict) and u.get("kind") and u.get("id")]


# --- reading Redis ------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """A job or a search in a pipeline: its name, its state, its upstreams by member."""

    member: str
    name: str
    state: str
    reason: str = ""
    after: tuple[str, ...] = ()
    names: dict = field(default_factory=dict, compare=False)  # upstream member -> name


def search_nodes(client: redis.Redis, ids: Iterable[str]) -> dict[str, Node]:
    """The searches ``ids`` as nodes (one pipelined read of their hashes)."""
    ids = list(dict.fromkeys(ids))
    if not ids:  # a fleet with no search loads nothing of a search's
        return {}
    from state.redis_conn import decoding
    from state.search.store import key as search_key

    pipe = decoding(client).pipeline(transaction=False)
    for sid in ids:
        pipe.hmget(search_key(sid), SEARCH_FIELDS)
    out = {}
    for sid, values in zip(ids, pipe.execute(), strict=True):
        h = dict(zip(SEARCH_FIELDS, values, strict=True))
        if h["name"] is None:
            continue
        after = _after(h["after"])
        out[member(Kind.SEARCH, sid)] = Node(
            member(Kind.SEARCH, sid),
            h["name"],
            h["outcome"] or h["state"] or SEARCH_RUNNING,
            h["outcome_reason"] or "",
            tuple(member(u["kind"], u["id"]) for u in after),
            {member(u["kind"], u["id"]): u.get("name", "") for u in after},
        )
    return out


def job_node(rec: JobRecord) -> Node:
    after = _after(rec.after)
    return Node(
        member(Kind.JOB, rec.job_id),
        rec.name,
        rec.state.value,
        rec.reason if rec.state.value in FAILURE else "",
        tuple(member(u["kind"], u["id"]) for u in after),
        {member(u["kind"], u["id"]): u.get("name", "") for u in after},
    )


def nodes_of(client: redis.Redis, members: Iterable[str]) -> dict[str, Node]:
    """The jobs and searches ``members`` name, as nodes; one that is gone is left out."""
    jobs, searches = [], []
    for m in dict.fromkeys(members):
        kind, ident = parse_member(m)
        (jobs if kind is Kind.JOB else searches).append(ident)
    out = {job_node(r).member: job_node(r) for r in fetch_many(client, jobs, UPSTREAM_FIELDS)}
    out.update(search_nodes(client, searches))
    return out


def awaited(client: redis.Redis, follower_members: Sequence[str]) -> dict[str, set[str]]:
    """Each follower's upstreams not yet succeeded (one pipelined read)."""
    from state.pipeline import waits_key
    from state.redis_conn import decoding

    pipe = decoding(client).pipeline(transaction=False)
    for m in follower_members:
        pipe.smembers(waits_key(*parse_member(m)))
    return dict(zip(follower_members, map(set, pipe.execute()), strict=True))


def edges_of(client: redis.Redis, rows: Sequence[JobRecord]) -> dict[str, tuple[Edge, ...]]:
    """Each follower's upstreams as they stand now, by the follower's job ID (rows without
    ``after`` are left out). Three pipelined reads for any number of rows."""
    got = _edges(client, {member(Kind.JOB, r.job_id): _after(r.after) for r in rows})
    return {parse_member(m)[1]: edges for m, edges in got.items()}


def search_edges(client: redis.Redis, search_ids: Iterable[str]) -> dict[str, tuple[Edge, ...]]:
    """The same for searches that follow upstreams of their own, by search ID."""
    nodes = search_nodes(client, search_ids)
    got = _edges(
        client, {m: [_up(u, n.names.get(u, "")) for u in n.after] for m, n in nodes.items()}
    )
    return {parse_member(m)[1]: edges for m, edges in got.items()}


def _up(m: str, name: str) -> dict:
    kind, ident = parse_member(m)
    return {"kind": kind.value, "id": ident, "name": name}


def _edges(client: redis.Redis, after: dict[str, list[dict]]) -> dict[str, tuple[Edge, ...]]:
    """Each follower member's upstreams (``after``: its {kind, id, name} list) as they stand."""
    after = {m: ups for m, ups in after.items() if ups}
    if not after:
        return {}
    waits = awaited(client, list(after))
    nodes = nodes_of(client, (member(u["kind"], u["id"]) for ups in after.values() for u in ups))
    return {
        m: tuple(
            _edge(u, nodes.get(member(u["kind"], u["id"])), member(u["kind"], u["id"]) in waits[m])
            for u in ups
        )
        for m, ups in after.items()
    }


def _edge(u: dict, node: Node | None, still: bool) -> Edge:
    if node is None:  # its record is gone (expired): say so rather than guess
        return Edge(u["kind"], u["id"], u.get("name", ""), "gone", "", still)
    return Edge(u["kind"], u["id"], u.get("name") or node.name, node.state, node.reason, still)


# --- the whole graph, for `fleet status --tree` ------------------------------------------
@dataclass(frozen=True)
class Graph:
    """Pipelines as nodes by member and the edges between them (upstream -> followers)."""

    nodes: dict[str, Node]

    def followers(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {m: [] for m in self.nodes}
        for m, node in self.nodes.items():
            for up in node.after:
                if up in out and m not in out[up]:
                    out[up].append(m)
        return out

    def roots(self) -> list[str]:
        """Nodes none of whose upstreams is in the graph: where each pipeline starts."""
        return [m for m, n in self.nodes.items() if not any(u in self.nodes for u in n.after)]

    def component(self, seeds: Iterable[str]) -> Graph:
        """The pipelines that hold any of ``seeds``: every node joined to one by an edge."""
        follows = self.followers()
        todo, seen = [s for s in seeds if s in self.nodes], set()
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            todo += [u for u in self.nodes[m].after if u in self.nodes] + follows[m]
        return Graph({m: n for m, n in self.nodes.items() if m in seen})


@dataclass(frozen=True)
class TreeLine:
    """One line of the drawing: its prefix (connectors), the node, and whether the node was
    drawn above already (a follower of two upstreams is drawn whole under its first one)."""

    prefix: str
    node: Node
    again: bool = False


def tree_lines(graph: Graph) -> list[TreeLine]:
    """The pipelines drawn as trees, upstream above follower, depth first, pipelines by their
    first step's name; a node with several upstreams is drawn whole once and named again elsewhere.
    Pure."""
    follows = graph.followers()
    out: list[TreeLine] = []
    drawn: set[str] = set()

    def walk(m: str, prefix: str, last: bool, top: bool) -> None:
        joint = "" if top else ("└─ " if last else "├─ ")
        again = m in drawn
        out.append(TreeLine(prefix + joint, graph.nodes[m], again))
        if again:
            return
        drawn.add(m)
        kids = follows[m]
        below = prefix + ("" if top else ("   " if last else "│  "))
        for i, kid in enumerate(kids):
            walk(kid, below, i == len(kids) - 1, False)

    roots = graph.roots() or list(graph.nodes)[:1]  # a cycle has no root (refused at publish)
    for root in sorted(roots, key=lambda m: graph.nodes[m].name):  # the same drawing each time
        if root not in drawn:
            walk(root, "", True, True)
    return out


def graph(client: redis.Redis, rows: Sequence[JobRecord], search_ids: Iterable[str]) -> Graph:
    """Every pipeline that holds one of ``rows`` (records read with ``after``) or one of the
    searches ``search_ids``: the rows, the searches, and every upstream they name, read
    until no new upstream turns up (a chain longer than the rows given reads on)."""
    nodes = {job_node(r).member: job_node(r) for r in rows if not r.search}
    nodes.update(search_nodes(client, search_ids))
    missing = {u for n in nodes.values() for u in n.after} - set(nodes)
    while missing:
        found = nodes_of(client, missing)
        nodes.update(found)
        missing = {u for n in found.values() for u in n.after} - set(nodes)
    piped = {m for m, n in nodes.items() if n.after} | {u for n in nodes.values() for u in n.after}
    return Graph(nodes).component(piped)
