"""Host verbs: `fleet capability` (this host), `fleet hosts` (the fleet, from heartbeats:
free/total GPUs, cores and RAM per host), `fleet why JOB` (why a job waits: every live
host's verdict, and what a host that could run it lacks now)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from core.constants import HOST_TTL_S
from core.ids import short_id
from fleet.cli.common import broker_problem, console, err, redis_client
from fleet.cli.tables import Layout
from fleet.query.jobs import human_duration

if TYPE_CHECKING:
    from fleet.query.hosts import HostView


def cmd_capability(args) -> int:
    import redis

    from routing.detect import detect
    from state.cluster import ClusterConfig, read_config

    cap = detect()
    try:
        config, unread = read_config(redis_client()), None
    except (
        redis.RedisError
    ) as e:  # no broker reachable: the default tiers still answer the question
        config, unread = ClusterConfig(), f"{broker_problem(e)}; showing the default tiers"
    reasons = config.tier_reasons(cap)
    queues = config.queues(cap)
    if args.json:
        print(
            json.dumps(
                {
                    "capability": config.effective(cap).to_dict(),
                    "queues": queues,
                    "tiers": reasons,
                    "config_error": unread,
                },
                indent=2,
            )
        )
        return 0
    if unread:
        err.print(f"fleet: {unread}", markup=False, highlight=False, soft_wrap=True)
    for warning in cap.warnings:
        err.print(
            f"warning: {warning}", style="yellow", markup=False, highlight=False, soft_wrap=True
        )
    c = config.effective(cap)
    console.print(
        f"[bold]{c.hostname}[/]: {c.cpu_cores} cores, {c.ram_total_gib:.1f} GiB RAM "
        f"({c.ram_available_gib:.1f} available)"
        + (f", overridden: {', '.join(c.overridden)}" if c.overridden else "")
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
            f"  {'[green]yes[/]' if why is None else '[red]no[/] '} {tier}"
            + (f": {why}" if why else "")
        )
    console.print(f"queues: {', '.join(queues) or 'none'}")
    return 0


def register(sub) -> None:
    s = sub.add_parser("capability", help="this host's capability and the queues it serves")
    s.add_argument(
        "--json", action="store_true", help="capability, queues and each tier's verdict as JSON"
    )
    s.set_defaults(fn=cmd_capability)
    s = sub.add_parser(
        "hosts", help="live workers: free/total GPUs, cores and RAM, jobs, queues in serving order"
    )
    s.add_argument(
        "--json",
        action="store_true",
        help="every host with its capability and running jobs, as JSON",
    )
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
        "why", help="why a job waits: its queue, each live host's verdict, its position"
    )
    s.add_argument(
        "job", help="job name, ID or ID prefix, or a sweep's base name (each of its jobs)"
    )
    s.add_argument(
        "--json", action="store_true", help="the explanation as JSON (a list for a sweep)"
    )
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
    columns=("host", "state", "GPUs", "cores", "RAM GiB", "jobs", "GPU models", "queues", "seen"),
    always=("host", "state", "GPUs", "cores", "RAM GiB"),
    optional=("jobs", "GPU models", "queues", "seen"),
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
    if args.json:
        print(json.dumps([v.to_dict(now) for v in views], indent=2))
        return 0
    if not views:
        console.print(
            "no live workers (none has written a heartbeat in the last "
            f"{HOST_TTL_S:g} s; start one with `celery -A tasks worker`)"
        )
        return 0
    console.print(render_hosts(views, now, wide=args.wide))
    return 0


def cmd_why(args) -> int:
    from fleet.query.why import WHY_SWEEP_MAX, why_each

    sweep, reports, note = why_each(redis_client(), args.job)
    if note:
        err.print(note, markup=False, highlight=False, soft_wrap=True)
    if args.json:
        print(json.dumps(reports if sweep else reports[0], indent=2))
        return 0
    if sweep:
        console.print(
            f"{args.job!r} is a sweep: why each of its jobs waits (at most {WHY_SWEEP_MAX}, "
            "waiting ones first)",
            markup=False,
            highlight=False,
        )
    for report in reports:
        print_why(report)
    return 0


def needs_text(n: dict) -> str:
    """What a host needs for a queue: ``CUDA, 2 GPUs, VRAM >= 24 GiB each, RAM >= 7 GiB``."""
    gpus, v = n.get("gpus", 0), n["min_vram_gib"]
    vram = (
        f"{v:g} GiB of VRAM on a shared GPU"
        if n.get("share_gpu")
        else f"VRAM >= {v:g} GiB" + (" each" if gpus > 1 else "")
        if v
        else ""
    )
    return (
        ", ".join(
            p
            for p in (
                "CUDA" if n["require_cuda"] else "",
                f"{gpus} GPUs" if gpus > 1 else "",
                vram,
                f"RAM >= {n['min_ram_gib']:g} GiB" if n["min_ram_gib"] else "",
                f"cores >= {n['min_cores']}" if n["min_cores"] else "",
            )
            if p
        )
        or "nothing"
    )


def print_why(report: dict) -> None:
    from rich.markup import escape

    out = console.print
    out(
        f"[bold]{escape(report['name'])}[/] ({short_id(report['job_id'])}): {report['state']}"
        + (f" on {report['worker']}" if report["worker"] else "")
        + (f", attempts {report['attempts']}" if report["attempts"] else ""),
        markup=True,
        highlight=False,
    )
    if report["last_error"]:
        out(f"  last error: {report['last_error'].splitlines()[0]}", markup=False, highlight=False)
    if search := report.get("search"):
        out(f"  search: {search['summary']}", markup=False, highlight=False)
        if search.get("trial_failed"):
            out(
                f"  failed for its search: {search['trial_failed']}",
                markup=False,
                highlight=False,
            )
    for i, q in enumerate(report["queues"]):
        needs = needs_text(q["needs"])
        label = "queue" if i == 0 else "fallback queue"
        out(
            f"{label} [bold]{escape(q['queue'])}[/] (tier {q['tier']}): a host needs {needs}"
            + (
                ""
                if q["known"]
                else "  [yellow](not in the current config: "
                "tiers changed since it was published)[/]"
            ),
            highlight=False,
        )
        if q["allowed_hosts"] is not None or q["denied_hosts"]:
            out(
                f"  allowed hosts: {q['allowed_hosts'] or 'any'}; "
                f"denied: {q['denied_hosts'] or 'none'}",
                markup=False,
                highlight=False,
            )
        pos = q.get("position")
        if pos:
            out(
                f"  position: {pos['ahead']} message(s) ahead of it, "
                f"{pos['waiting_in_queue']} waiting in {q['queue']}"
                if pos["in_list"]
                else f"  not waiting in {q['queue']} now "
                f"({pos['waiting_in_queue']} message(s) there)",
                markup=False,
                highlight=False,
            )
        if pos and pos.get("fair_share"):
            out(f"  fair share: {pos['fair_share']}", markup=False, highlight=False)
        if not q["hosts"]:
            out("  [red]no live hosts[/] (no worker heartbeat in Redis)")
        lacking = {c["host"]: _capable_line(c) for c in q["capable"] if c.get("lacks_now")}
        for h in q["hosts"]:
            verdict = (
                "[red]cannot[/]: " + escape("; ".join(h["reasons"]))
                if not h["could_run"]
                else "[yellow]qualifies, but cannot start it now[/]: " + escape(lacking[h["host"]])
                if h["host"] in lacking
                else "[green]could run it[/]"
            )
            out(f"  {escape(h['host'])}: {verdict}", highlight=False)
        if q.get("no_live_host_has"):
            out(f"  {q['no_live_host_has']}", markup=False, highlight=False)
        for c in q["capable"]:
            if c["host"] not in lacking:  # a host that lacks room said so on its own line
                out("  " + _capable_line(c), markup=False, highlight=False)


def _capable_line(c: dict) -> str:
    """What a host that could run the job is doing: what the job lacks there now, or its jobs."""
    ahead = c["waiting_in_queues_it_serves_first"]
    tail = f"; {ahead} message(s) wait in queues it serves first" if ahead else ""
    if c.get("lacks_now"):
        return c["lacks_now"] + tail
    busy = "; ".join(f"{b['name']} ({b['queue']})" for b in c["busy_with"])
    return f"{c['host']} " + (f"is busy with: {busy}" if busy else "is idle") + tail
