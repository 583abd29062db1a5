"""Advance a search: count the trials that ended, then issue the next ones, fenced.

There is no controller: whoever sees a trial end (its worker, the sweep of the reaper,
`fleet cancel`, the publisher for the first trials) calls ``advance``. Each step is atomic
in Redis and idempotent, so two processes advancing at once, or one advancing again after a
crash, neither skip nor duplicate a trial (docs/search.md):

1. ``SearchStore.sync`` counts each ended trial once (it leaves the live set in that step);
2. the mirror (``state.search.study``) samples the next number with a sampler seeded from (search
   seed, number), so a retry asks the same;
3. ``SearchStore.issue`` publishes it only if its number is still the next one and the budget
   (``trials``, ``parallel``, the failure budget) allows; a lost race asks again.
"""

from __future__ import annotations

import json
import logging
import time

import redis

from core import constants as C
from core.ids import short_id
from manifest.hyper import TRAINERS
from manifest.search.config import SearchConfig
from manifest.search.spec import trial_job_id, trial_name
from state.records import PublishItem, publish_call
from state.redis_conn import decoding
from state.search.store import Issued, SearchStore, Template, key
from state.search.study import MIRRORS, Mirrors, decode_params
from state.templates import fill

log = logging.getLogger("fleet.search")


def room(r: redis.Redis, search_id: str) -> int | None:
    """The next trial's number when the budget lets one more be issued now, else None."""
    pipe = r.pipeline(transaction=False)
    pipe.hmget(key(search_id), "issued", "trials", "parallel", "stopped", "state")
    pipe.scard(key(search_id, "live"))
    (issued, trials, parallel, stopped, waiting), live = pipe.execute()
    if issued is None or stopped or waiting or int(issued) >= int(trials) or live >= int(parallel):
        return None
    return int(issued)


def advance(client: redis.Redis, search_id: str, *, mirrors: Mirrors = MIRRORS) -> list[int]:
    """Count ended trials and issue as many new ones as the budget allows; their numbers."""
    r = decoding(client)
    store = SearchStore(r)
    store.sync(search_id)
    got = store.template(search_id)
    if got is None:
        return []
    config, tpl = got
    issued: list[int] = []
    for _ in range(2 * config.parallel + 4):  # each pass issues one, or loses one race
        if room(r, search_id) is None:
            break
        mirror = mirrors.get(r, search_id, config)
        with mirror.lock:
            number = mirror.count
            trial = mirror.ask(number)
        status = store.issue(
            search_id, number, trial, *trial_job(search_id, number, config, tpl, trial)
        )
        if status is not Issued.OK:
            mirrors.drop(search_id)  # it holds the trial it asked for; Redis does not
            if status is Issued.RACE:
                continue
            break
        issued.append(number)
    if issued:
        log.info("search %s: issued trial(s) %s", short_id(search_id), ", ".join(map(str, issued)))
    return issued


def trial_spec(search_id: str, number: int, base: dict, params: dict) -> dict:
    """Trial ``number``'s job spec: the base job with the trial's values in its hyper."""
    hyper = {**base["hyper"], **params}
    model = TRAINERS.get(base.get("model") or "")
    for name, p in (model or {}).items():  # an int sampled for a float stays a float downstream
        if p.type is float and name in hyper:
            hyper[name] = float(hyper[name])
    return {
        **base,
        "name": trial_name(base["name"], number),
        "job_id": trial_job_id(search_id, number),
        "hyper": hyper,
        "search": search_id,
        "trial": number,
    }


def trial_job(
    search_id: str, number: int, config: SearchConfig, tpl: Template, trial: dict
) -> tuple[list, list]:
    """publish.lua's KEYS and ARGV for trial ``number``: its record and its message."""
    params = decode_params(trial["params"], config.space)
    spec = trial_spec(search_id, number, tpl.base, params)
    spec_json = json.dumps(spec)
    jid, name = spec["job_id"], spec["name"]
    fields = {
        **tpl.fields,
        "job_id": jid,
        "name": name,
        "spec": spec_json,
        "search": search_id,
        "trial": str(number),
        "params": json.dumps(params),
    }
    message = fill(tpl.text, tpl.before, tpl.after, jid, name, spec_json)
    item = PublishItem(jid, name, tpl.list_key, message, fields)
    return publish_call(item, False, str(time.time()))


def sweep(client: redis.Redis, *, mirrors: Mirrors = MIRRORS) -> dict[str, list[int]]:
    """Advance every active search: trials whose end was recorded but never advanced (their
    worker died between), and searches whose publisher stopped before its first trials."""
    r = decoding(client)
    out = {}
    active = r.smembers(C.ACTIVE_SEARCHES_KEY)
    mirrors.keep_only(active)
    for sid in sorted(active):
        try:
            if issued := advance(r, sid, mirrors=mirrors):
                out[sid] = issued
        except redis.ConnectionError:
            raise
        except Exception as e:  # one broken search (a script error, no Optuna here) spares the rest
            log.error("search %s: advance failed: %s", short_id(sid), e)
    return out
