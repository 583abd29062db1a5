"""Host verbs: `fleet capability` (this host), `fleet hosts` (the fleet, from heartbeats:
free/total GPUs, cores and RAM per host), `fleet why JOB` (why a job waits: every live
host's verdict, and what a host that could run it lacks now)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from core.constants import HOST_TTL_S
from core.ids import short_id
from fleet.cli.common import broker_problem, console, emit, json_option, redis_client, say
from fleet.cli.tables import Layout
from fleet.query.jobs import human_duration

if TYPE_CHECKING:
    from fleet.query.hosts import HostView
    from fleet.query.why import Capable, QueueReport, WhyReport
    from manifest.schema import Needs


def cmd_capability(args) -> int:
    import redis

    from routing.detect import detect
    from state.cluster import ClusterConfig, read_config

    cap = detect()
    try:
        config, unread = read_config(redis_client()), None
    # no broker reachable: the default tiers still answer the question
    except redis.RedisError as e:
        config, unread = ClusterConfig(), f"{broker_problem(e)}; showing the default tiers"
    reasons = config.tier_reasons(cap)
    queues = config.queues(cap)
    data = {
        "capability": config.effective(cap).to_dict(),
        "queues": queues,
        "tiers": reasons,
        "config_error": unread,
    }
    return emit(args, data, lambda: print_capability(cap, config, unread))


def print_capability(cap, config, unread: str | None) -> None:
    reasons, queues = config.tier_reasons(cap), config.queues(cap)
    if unread:
        say(f"fleet: {unread}")
    for warning in cap.warnings:
        say(f"warning: {warning}", style="yellow")
    c = config.effective(cap)
    console.print(
        Text.assemble(
            (c.hostname, "bold"),
            f": {c.cpu_cores} cores, {c.ram_total_gib:.1f} GiB RAM "
            f"({c.ram_available_gib:.1f} available)"
            + (f", overridden: {', '.join(c.overridden)}" if c.overridden else ""),
        )
    )
    for d in c.cuda_devices:
        console.print(
            f"  cuda:{d.index} {d.name} {d.vram_total_gib:g} GiB ({d.vram_free_gib:g} free) "
            f"cc {d.compute_capability}"
        )
    if not c.cuda_devices:
        console.print("  no CUDA devices")
    for tier, why in reasons.items():
        console.print(
            Text.assemble(
                "  ",
                ("yes", "green") if why is None else ("no ", "red"),
                f" {tier}" + (f": {why}" if why else ""),
            )
        )
    console.print(f"queues: {', '.join(queues) or 'none'}")


def register(sub) -> None:
    s = sub.add_parser("capability", help="this host's capability and the queues it serves")
    json_option(s, "capability, queues and each tier's verdict as JSON")
    s.set_defaults(fn=cmd_capability)
    s = sub.add_parser(
        "hosts", help="live workers: free/total GPUs, cores and RAM, jobs, queues in serving order"
    )
    json_option(s, "every host with its capability and running jobs, as JSON")
    s.add_argument(
        "--all", action="store_true", help="also hosts that stopped or went silent lately"
    )
    s.add_argument(
        "--wide",
        action="store_true",
        help="every column (GPU models, queues, last seen), however wide the terminal",
    )
    s.set_defaults(fn=cmd_hosts)
    s = sub.add_parser(
        "why",
        help="why a job waits (its queue, each live host's verdict, its position), or where a "
        "search stands",
    )
    s.add_argument(
        "job",
        help="job name, ID or ID prefix, a search's name, or a sweep's base name "
        "(each of its jobs)",
    )
    json_option(s, "the explanation as JSON (a list for a sweep)")
    s.set_defaults(fn=cmd_why)


def _ago(seconds: float) -> str:
    return f"{human_duration(seconds)} ago"


def gpu_models(cap: dict | None) -> str:
    """The host's GPUs by model, alike ones counted: ``4× NVIDIA H100 80 GiB``."""
    counts: dict[str, int] = {}
    for d in (cap or {}).get("cuda_devices") or []:
        label = f"{d['name']} {d['vram_total_gib']:g} GiB"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n}× {label}" if n > 1 else label for label, n in counts.items()) or "-"


def _gib(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


HOSTS = Layout(
    columns=(
        "host",
        "state",
        "GPUs",
        "cores",
        "RAM GiB",
        "jobs",
        "GPU models",
        "queues",
        "seen",
        "address",
    ),
    always=("host", "state", "GPUs", "cores", "RAM GiB"),
    optional=("jobs", "GPU models", "queues", "seen", "address"),
    shrinks={"jobs": 10, "GPU models": 10, "queues": 10},
    right=("GPUs", "cores", "RAM GiB"),
)


def host_cells(v: HostView, now: float) -> dict:
    """One row of `fleet hosts`: free/total GPUs, cores and RAM from the host's pool; a live
    host whose heartbeat has none (an older worker) shows ``?`` for what is free, one that
    stopped or went silent holds nothing."""
    cap, pool = v.capability or {}, v.resources()
    state = ("busy" if v.busy else "idle") if v.live else f"{v.state} {_ago(now - v.seen_at)}"
    if pool is not None and pool.yielded():
        state += ", yielded"
    jobs = ", ".join(r.name for r in v.running) or "-"
    if not v.live:
        gpus = cores = ram = "-"
    elif pool is None:
        n = len(cap.get("cuda_devices") or ())
        gpus = f"?/{n}" if n else "-"
        cores, ram = (
            f"?/{cap.get('cpu_cores', '?')}",
            f"?/{_gib(cap['ram_total_gib'])}" if cap else "?",
        )
    else:
        gpus = (
            "-"
            if not pool.gpus
            else (
                f"{pool.free_gpus}/{len(pool.gpus)}"
                + (f", {pool.shared_gpus} shared" if pool.shared_gpus else "")
            )
        )
        cores = f"{pool.cores_free}/{pool.cores_total}"
        ram = f"{_gib(pool.ram_free_gib)}/{_gib(pool.ram_total_gib)}"
    return {
        "host": Text(v.hostname),
        "state": state,
        "GPUs": gpus,
        "cores": cores,
        "RAM GiB": ram,
        "jobs": Text(jobs),
        "GPU models": gpu_models(cap),
        "queues": ", ".join(v.queues) or "-",
        "seen": _ago(now - v.seen_at),
        "address": v.addr or "-",
    }


def summary(views: list[HostView]) -> str:
    """The line under the table: live and busy hosts, and what is free of the pools."""
    live = [v for v in views if v.live]
    pools = [p for p in (v.resources() for v in live) if p is not None]
    line = f"{len(live)} live, {sum(v.busy for v in live)} busy"
    if pools:
        line += (
            f"; free/total: GPUs {sum(p.free_gpus for p in pools)}/"
            f"{sum(len(p.gpus) for p in pools)}, "
            f"cores {sum(p.cores_free for p in pools)}/{sum(p.cores_total for p in pools)}, "
            f"RAM {_gib(sum(p.ram_free_gib for p in pools))}/"
            f"{_gib(sum(p.ram_total_gib for p in pools))} GiB"
        )
    older = [v for v in live if v.resources() is None]
    if older:
        line += (
            f"; {sum(len(v.running) for v in older)}/{sum(v.slots for v in older)} slots in use"
            + (" on workers that report no pool" if pools else "")
        )
    return line


def yield_lines(views: list[HostView]) -> list[str]:
    """Under the table, one line per host and reason its GPUs are yielded to their owner:
    ``big4: yielded: GPU 0 in use by pid 4242 (not fleet)``."""
    out = []
    for v in views:
        pool = v.resources()
        for why in dict.fromkeys((pool.yielded() if pool else {}).values()):
            out.append(f"{v.hostname}: yielded: {why}")
    return out


def warning_lines(views: list[HostView]) -> list[Text]:
    """Under the table, what each live worker warns of: GPUs it could not detect, share_gpu
    jobs it will not serve."""
    return [
        Text(f"{v.hostname}: warning: {w}", style="yellow")
        for v in views
        if v.live
        for w in v.warnings
    ]


def render_hosts(
    views: list[HostView], now: float, *, width: int | None = None, wide: bool = False
) -> Group:
    """`fleet hosts` for a terminal ``width`` columns wide (``wide``: every column)."""
    table, _ = HOSTS.table([host_cells(v, now) for v in views], width or console.width, wide)
    return Group(
        table,
        Text(summary(views)),
        *(Text(line) for line in yield_lines(views)),
        *warning_lines(views),
    )


def cmd_hosts(args) -> int:
    import time

    from fleet.query.hosts import read_hosts

    views = read_hosts(redis_client(), include_gone=args.all)
    now = time.time()

    def human() -> None:
        if not views:
            console.print(
                "no live workers (none has written a heartbeat in the last "
                f"{HOST_TTL_S:g} s; start one with `celery -A tasks worker`)"
            )
        else:
            console.print(render_hosts(views, now, wide=args.wide))

    return emit(args, lambda: [v.to_dict(now) for v in views], human)


def cmd_why(args) -> int:
    from fleet.query.why import WHY_SWEEP_MAX, why_each
    from state.search.index import find_searches

    client = redis_client()
    if find_searches(client, args.job):  # only a search's name loads the search explainer
        from fleet.query.searchwhy import lines, search_why

        found = search_why(client, args.job)
        if found is not None:  # a search, not its trials as a sweep
            return emit(
                args, found.to_dict(), lambda: [console.print(Text(ln)) for ln in lines(found)]
            )
    sweep, reports, note = why_each(client, args.job)
    if note:
        say(note)

    def human() -> None:
        if sweep:
            console.print(
                f"{args.job!r} is a sweep: why each of its jobs waits (at most {WHY_SWEEP_MAX}, "
                "waiting ones first)"
            )
        for report in reports:
            print_why(report)

    data = [r.to_dict() for r in reports] if sweep else reports[0].to_dict()
    return emit(args, data, human)


def needs_text(n: Needs) -> str:
    """What a host needs for a queue: ``CUDA, 2 GPUs, VRAM >= 24 GiB each, RAM >= 7 GiB``."""
    v = n.min_vram_gib
    vram = (
        f"{v:g} GiB of VRAM on a shared GPU"
        if n.share_gpu
        else f"VRAM >= {v:g} GiB" + (" each" if n.gpus > 1 else "")
        if v
        else ""
    )
    parts = (
        "CUDA" if n.require_cuda else "",
        f"{n.gpus} GPUs" if n.gpus > 1 else "",
        vram,
        f"RAM >= {n.min_ram_gib:g} GiB" if n.min_ram_gib else "",
        f"cores >= {n.min_cores}" if n.min_cores else "",
    )
    return ", ".join(p for p in parts if p) or "nothing"


def print_why(report: WhyReport) -> None:
    out = console.print
    out(
        Text.assemble(
            (report.name, "bold"),
            f" ({short_id(report.job_id)}): {report.state.value}"
            + (f" on {report.worker}" if report.worker else "")
            + (f", attempts {report.attempts}" if report.attempts else "")
            + (f", runs {report.runs}" if report.runs > 1 else ""),
        )
    )
    if report.rerun_reason:  # a run that is not its first says why it ran again
        out(f"  ran again: {report.rerun_reason}", markup=False)
    if report.last_error:  # its end's reason: the error's first line only introduces its output
        out(f"  last error: {report.reason or report.last_error.splitlines()[0]}")
    if report.search is not None:
        out(f"  search: {report.search.summary}")
        if report.search.trial_failed:
            out(f"  failed for its search: {report.search.trial_failed}")
    if report.gang is not None:
        from fleet.query.why import gang_line

        out(f"  {gang_line(report.gang)}")
    for line in pipeline_lines(report):
        out(line, markup=False)
    if report.state.terminal:  # hosts' verdicts are about running it, which is over
        ref = short_id(report.job_id)
        out("  it has ended; no host runs it now")
        out(f"  its runs: fleet show {ref}; to run it again: fleet requeue {ref}")
        return
    for i, q in enumerate(report.queues):
        print_queue(q, "queue" if i == 0 else "fallback queue")


def pipeline_lines(report: WhyReport) -> list[str]:
    """A follower's part of `fleet why`: what it waits on, each upstream's state and reason,
    or the upstream that cancelled it and how to re-arm it. Pure."""
    from fleet.query.pipeline import cancel_note, wait_note
    from state.jobrecord import JobState

    if report.cancelled_by is not None:
        up = report.cancelled_by
        name = up.get("name") or up.get("id") or "the upstream"
        return [
            f"  cancelled by its pipeline: {cancel_note(up)}",
            f"  once {name} is fixed: fleet requeue {name} (re-arms the jobs it cancelled)",
        ]
    if report.state is not JobState.WAITING:
        return []
    lines = [f"  {wait_note(report.upstreams)}: queued once every upstream succeeded"]
    for e in report.upstreams:
        mark = "waited on" if e.awaited else "done"
        why = f": {e.reason}" if e.reason else ""
        lines.append(f"  upstream {e.label()} [{mark}]{why}")
    return lines


def print_queue(q: QueueReport, label: str) -> None:
    out, f = console.print, q.facts
    out(
        Text.assemble(
            f"{label} ",
            (f.name, "bold"),
            f" (tier {f.tier}): a host needs {needs_text(f.needs)}",
            ""
            if f.known
            else ("  (not in the current config: tiers changed since it was published)", "yellow"),
        )
    )
    c = f.constraint
    if c is not None and (c.allowed is not None or c.denied):
        allowed = sorted(c.allowed) if c.allowed is not None else None
        out(f"  allowed hosts: {allowed or 'any'}; denied: {sorted(c.denied) or 'none'}")
    pos = q.position
    if pos is not None:
        out(
            f"  position: {pos.ahead} message(s) ahead of it, "
            f"{pos.waiting_in_queue} waiting in {f.name}"
            if pos.in_list
            else f"  not waiting in {f.name} now ({pos.waiting_in_queue} message(s) there)"
        )
        if pos.fair_share:
            out(f"  fair share: {pos.fair_share}")
    if not q.hosts:
        out(Text.assemble("  ", ("no live hosts", "red"), " (no worker heartbeat in Redis)"))
    lacking = {c.host: _capable_line(c) for c in q.capable if c.lacks_now}
    for h in q.hosts:
        verdict = (
            (("cannot", "red"), ": " + "; ".join(h.reasons))
            if not h.ok
            else (("qualifies, but cannot start it now", "yellow"), ": " + lacking[h.hostname])
            if h.hostname in lacking
            else (("could run it", "green"),)
        )
        out(Text.assemble(f"  {h.hostname}: ", *verdict))
    if q.no_live_host_has:
        out(f"  {q.no_live_host_has}")
    for c in q.capable:
        if c.host not in lacking:  # a host that lacks room said so on its own line
            out("  " + _capable_line(c))


def _capable_line(c: Capable) -> str:
    """What a host that could run the job is doing: what the job lacks there now, or its jobs."""
    ahead = c.waiting_first
    tail = f"; {ahead} message(s) wait in queues it serves first" if ahead else ""
    if c.lacks_now:
        return c.lacks_now + tail
    busy = "; ".join(f"{b.name} ({b.queue})" for b in c.busy_with)
    return f"{c.host} " + (f"is busy with: {busy}" if busy else "is idle") + tail
