"""`fleet publish` for ``[jobs.search]``: record each new search and queue its first trials.

A search is recorded once (its id is its content's digest, ``manifest.search.spec``):
publishing the same manifest again finds it and changes nothing. A changed search under a
name another search holds is refused, with the fix (a new name): the name is how results,
plots, `fleet status` and the trials' names (``NAME[trial=N]``) tell searches apart. The
first ``parallel`` trials are issued by ``state.search.advance``, as every later one is, so a
publisher that dies after the record leaves the rest to the sweep (``tasks.worker``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis

from core.errors import SearchRefused
from core.ids import short_id
from fleet.message_template import MessageTemplates
from fleet.route_cache import RouteCache
from manifest import pipeline
from manifest.schema import JobSpec, Manifest
from manifest.search.spec import SearchSpec
from state.search import advance, study
from state.search.store import Created, SearchStore, Template
from state.search.view import SearchView, find_searches, read_search

REFUSED = "refused"  # the start of a refused search's why


@dataclass(frozen=True)
class SearchRow:
    spec: SearchSpec
    queue: str
    action: str  # publish | skip
    why: str

    @property
    def refused(self) -> bool:
        return self.why.startswith(REFUSED)


def name_taken(spec: SearchSpec, holder: SearchView | None, holder_id: str) -> str:
    """Why ``spec`` may not take its name from the search ``holder_id``, and the fix."""
    done = f", {holder.ended}/{holder.config.trials} ended" if holder else ""
    return (
        f"{REFUSED}: another search is named {spec.name} ({short_id(holder_id)}{done}); this "
        f"one ({short_id(spec.search_id)}) differs in its job or its settings. Give it a new "
        f'name (e.g. name = "{spec.name}-2"): results, plots and trial names go by name'
    )


def plan(client: redis.Redis | None, manifest: Manifest) -> list[SearchRow]:
    """What publishing would do for each search, and why (no client: offline, as if none
    was published before)."""
    route = RouteCache(manifest)
    rows = []
    for s in manifest.searches:
        r = route(s.base)
        assert r is not None, "the loader rejects jobs no tier guarantees"
        holder = find_searches(client, s.name) if client is not None else []
        seen = read_search(client, holder[0], trials=False) if holder else None
        c = s.config
        if holder and holder[0] != s.search_id:
            rows.append(SearchRow(s, r.queue, "skip", name_taken(s, seen, holder[0])))
        elif problems := study.problems(s.config):
            fix = f"fix them in jobs.{s.name}'s [jobs.search]"
            rows.append(SearchRow(s, r.queue, "skip", f"{REFUSED}: {'; '.join(problems)}; {fix}"))
        elif seen is None:
            rows.append(
                SearchRow(
                    s,
                    r.queue,
                    "publish",
                    f"new search: {c.trials} trials, {c.parallel} at once"
                    + pipeline.waits_note(s.base.after),
                )
            )
        else:
            rows.append(
                SearchRow(s, r.queue, "skip", f"search exists ({seen.ended}/{c.trials} ended)")
            )
    return rows


def refuse(rows: list[SearchRow]) -> None:
    """Raise SearchRefused naming each refused search (before anything is sent)."""
    refused = [r.why for r in rows if r.refused]
    if refused:
        raise SearchRefused("; ".join(refused))


def publish(
    client: redis.Redis,
    factory: MessageTemplates,
    rows: list[SearchRow],
    owner: str,
    fields: Callable[[JobSpec, str, str], dict],
) -> None:
    """Record each new search with its trials' template, then issue its first trials."""
    store = SearchStore(client)
    for row in rows:
        base = row.spec.base
        who = base.owner or owner  # the job table's own owner key outranks the publisher's
        text, before, after = factory.template(row.queue, base.priority, who)
        tpl = Template(
            base.to_dict(),
            text,
            before,
            after,
            factory.list_key(row.queue, base.priority, who),
            fields(base, row.queue, who),
        )
        edges = pipeline.record_fields(base.after, base.inputs, base.params_from)
        created, holder = store.create(
            row.spec.search_id, base.name, row.spec.config, tpl, edges=edges
        )
        if created is Created.NAME_TAKEN:  # another publisher took the name since the plan
            raise SearchRefused(
                name_taken(row.spec, read_search(client, holder, trials=False), holder)
            )
        advance.advance(client, row.spec.search_id)
