"""`fleet status --tree`: every pipeline drawn upstream above follower, each step's state.

A flag of `status`, not a verb of its own: it is the same jobs under the same filters
(``--name final`` draws the pipelines that hold ``final``), drawn by their edges instead of
listed by interest. ``tree_rows`` is pure: a ``Graph`` and a width in, lines of text out.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from core.ids import short_id
from fleet.cli.common import STATE_STYLE, console, emit, redis_client
from fleet.query import jobs as Q
from fleet.query.pipeline import UPSTREAM_FIELDS, Graph, Node, graph, tree_lines
from manifest.pipeline import Kind, parse_member
from state.jobrecord import JobState, fetch_many
from state.search.view import all_searches

ID_CHARS = 8  # a short ID that `fleet show`/`why` take (4+ characters), as status shows them
REASON_MIN = 12  # a reason cut shorter than this says nothing: drop it instead


def node_text(node: Node, again: bool) -> tuple[str, str, str]:
    """(name and kind, state, tail) of one node: ``tune (search)``, ``running``, its short ID
    and, for a failed or cancelled step, its reason; a node drawn above says so instead."""
    kind, ident = parse_member(node.member)
    name = f"{node.name} (search)" if kind is Kind.SEARCH else node.name
    if again:
        return name, "", "(drawn above)"
    tail = short_id(ident)[:ID_CHARS]
    return name, node.state, f"{tail}  {node.reason}" if node.reason else tail


def tree_rows(g: Graph, width: int) -> list[tuple[str, str, str]]:
    """The drawing as (left, state, right) per line, within ``width`` columns: the prefix and
    name and the state stay whole; the ID and reason are cut to what is left. Pure."""
    cells = []
    for ln in tree_lines(g):
        name, state, tail = node_text(ln.node, ln.again)
        cells.append((ln.prefix + name, state, tail))
    left = max((len(c[0]) for c in cells), default=0)
    state = max((len(c[1]) for c in cells), default=0)
    room = width - left - state - 4
    out = []
    for name, st, tail in cells:
        if len(tail) > room:
            tail = tail[: max(room - 1, 0)] + "…" if room >= REASON_MIN else tail[:ID_CHARS]
        out.append((name.ljust(left), st.ljust(state), tail))
    return out


def to_dict(g: Graph) -> dict:
    """`fleet status --tree --json`: every node with its upstreams, and where pipelines start."""
    return {
        "roots": g.roots(),
        "nodes": [
            {
                "member": m,
                "kind": parse_member(m)[0].value,
                "id": parse_member(m)[1],
                "name": n.name,
                "state": n.state,
                "reason": n.reason,
                "after": list(n.after),
            }
            for m, n in g.nodes.items()
        ],
    }


def _styled(state: str) -> str:
    try:
        return STATE_STYLE[JobState(state.strip())]
    except ValueError:  # a search's "running" or "waiting" is a job state too; "gone" is not
        return "dim"


def render_tree(g: Graph, width: int | None = None) -> Group:
    rows = tree_rows(g, width or console.width)
    if not rows:
        return Group(
            Text("no pipelines: no job or search was published with after, inputs or params_from")
        )
    return Group(
        *(Text.assemble(name, "  ", (st, _styled(st)), "  ", tail) for name, st, tail in rows)
    )


def pipelines(client, flt: Q.JobFilter) -> Graph:
    """Every pipeline; with a filter, those holding a step it matches. Reads only the fields
    a step's line needs of every job (its name, state, reason and upstreams)."""
    rows = fetch_many(client, Q.job_ids(client), UPSTREAM_FIELDS)
    g = graph(client, rows, all_searches(client).values())
    if not flt.describe():
        return g
    seeds = [
        m
        for m, n in g.nodes.items()
        if (not flt.states or n.state in {s.value for s in flt.states})
        and (flt.name is None or Q.name_matches(n.name, flt.name))
    ]
    return g.component(seeds)


def cmd_tree(args, flt: Q.JobFilter) -> int:
    g = pipelines(redis_client(), flt)
    return emit(args, lambda: to_dict(g), lambda: console.print(render_tree(g)))
