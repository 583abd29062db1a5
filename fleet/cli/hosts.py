"""Host verbs: `fleet capability` (this host), `fleet hosts` (the fleet, from heartbeats),
`fleet why JOB` (why a job waits: every live host's verdict)."""
from __future__ import annotations

import json

from fleet.cli.common import console, redis_client
from core.constants import HOST_TTL_S


def cmd_capability(args) -> int:
    from state.cluster import ClusterConfig, read_config
    from routing.detect import detect
    cap = detect()
    try:
        config = read_config(redis_client())
    except Exception:  # no broker reachable: the default tiers still answer the question
        config = ClusterConfig()
    reasons = config.tier_reasons(cap)
    queues = config.queues(cap)
    if args.json:
        print(json.dumps({"capability": config.effective(cap).to_dict(), "queues": queues,
                          "tiers": reasons}, indent=2))
        return 0
    c = config.effective(cap)
    console.print(f"[bold]{c.hostname}[/]: {c.cpu_cores} cores, {c.ram_total_gib:.1f} GiB RAM "
                  f"({c.ram_available_gib:.1f} available)" + (f", overridden: {', '.join(c.overridden)}" if c.overridden else ""))
    for d in c.cuda_devices:
        console.print(f"  cuda:{d.index} {d.name} {d.vram_total_gib:g} GiB ({d.vram_free_gib:g} free) cc {d.compute_capability}")
    if not c.cuda_devices:
        console.print("  no CUDA devices")
    for tier, why in reasons.items():
        console.print(f"  {'[green]yes[/]' if why is None else '[red]no[/] '} {tier}" + (f": {why}" if why else ""))
    console.print(f"queues: {', '.join(queues) or 'none'}")
    return 0


def register(sub) -> None:
    s = sub.add_parser("capability", help="this host's capability and the queues it serves")
    s.add_argument("--json", action="store_true", help="capability, queues and each tier's verdict as JSON")
    s.set_defaults(fn=cmd_capability)
    s = sub.add_parser("hosts", help="live workers: GPUs, RAM, cores, queues in serving order, jobs")
    s.add_argument("--json", action="store_true", help="every host with its capability and running jobs, as JSON")
    s.add_argument("--all", action="store_true", help="also hosts that stopped or went silent lately")
    s.set_defaults(fn=cmd_hosts)
    s = sub.add_parser("why", help="why a job waits: its queue, each live host's verdict, its position")
    s.add_argument("job", help="job name, ID or ID prefix, or a sweep's base name (each of its jobs)")
    s.add_argument("--json", action="store_true", help="the explanation as JSON (a list for a sweep)")
    s.set_defaults(fn=cmd_why)


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s}s ago" if s < 120 else f"{s // 60}m ago" if s < 7200 else f"{s // 3600}h ago"


def _gpus(cap: dict | None) -> str:
    devices = (cap or {}).get("cuda_devices") or []
    return ", ".join(f"{d['name']} {d['vram_total_gib']:g} GiB" for d in devices) or "-"


def cmd_hosts(args) -> int:
    import time
    from rich.table import Table
    from fleet.cli.common import plain
    from fleet.query.hosts import read_hosts
    views = read_hosts(redis_client(), include_gone=args.all)
    now = time.time()
    if args.json:
        print(json.dumps([v.to_dict(now) for v in views], indent=2))
        return 0
    if not views:
        console.print("no live workers (none has written a heartbeat in the last "
                      f"{HOST_TTL_S:g} s; start one with `celery -A tasks worker`)")
        return 0
    table = Table(title="hosts")
    for col in ("host", "state", "GPUs", "RAM GiB", "cores", "queues (serving order)", "jobs", "seen"):
        table.add_column(col)
    for v in views:
        cap = v.capability or {}
        state = ("busy" if v.busy else "idle") if v.live else v.state
        jobs = "; ".join(f"{r.name} ({r.queue})" for r in v.running) or "-"
        load = f"{len(v.running)}/{v.slots} " if v.live else ""
        table.add_row(*plain(v.hostname, state, _gpus(cap), f"{cap.get('ram_total_gib', 0):.1f}" if cap else "-",
                             str(cap.get("cpu_cores", "-")), ", ".join(v.queues) or "-", load + jobs,
                             _ago(now - v.seen_at)))
    console.print(table)
    live = [v for v in views if v.live]
    console.print(f"{len(live)} live, {sum(v.busy for v in live)} busy, "
                  f"{sum(len(v.running) for v in live)}/{sum(v.slots for v in live)} slots in use")
    return 0


def cmd_why(args) -> int:
    from fleet.query.why import WHY_SWEEP_MAX, why_each
    sweep, reports = why_each(redis_client(), args.job)
    if args.json:
        print(json.dumps(reports if sweep else reports[0], indent=2))
        return 0
    if sweep:
        console.print(f"{args.job!r} is a sweep: why each of its jobs waits (at most {WHY_SWEEP_MAX}, "
                      "waiting ones first)", markup=False, highlight=False)
    for report in reports:
        print_why(report)
    return 0


def print_why(report: dict) -> None:
    from rich.markup import escape
    out = console.print
    out(f"[bold]{escape(report['name'])}[/] ({report['job_id'][:12]}): {report['state']}"
        + (f" on {report['worker']}" if report["worker"] else "")
        + (f", attempts {report['attempts']}" if report["attempts"] else ""), markup=True, highlight=False)
    if report["last_error"]:
        out(f"  last error: {report['last_error'].splitlines()[0]}", markup=False, highlight=False)
    for i, q in enumerate(report["queues"]):
        n = q["needs"]
        needs = ", ".join(p for p in ("CUDA" if n["require_cuda"] else "",
                                      f"VRAM >= {n['min_vram_gib']:g} GiB" if n["min_vram_gib"] else "",
                                      f"RAM >= {n['min_ram_gib']:g} GiB" if n["min_ram_gib"] else "",
                                      f"cores >= {n['min_cores']}" if n["min_cores"] else "") if p) or "nothing"
        label = "queue" if i == 0 else "fallback queue"
        out(f"{label} [bold]{escape(q['queue'])}[/] (tier {q['tier']}): a host needs {needs}"
            + ("" if q["known"] else "  [yellow](not in the current config: tiers changed since it was published)[/]"),
            highlight=False)
        if q["allowed_hosts"] is not None or q["denied_hosts"]:
            out(f"  allowed hosts: {q['allowed_hosts'] or 'any'}; denied: {q['denied_hosts'] or 'none'}",
                markup=False, highlight=False)
        pos = q.get("position")
        if pos:
            out(f"  position: {pos['ahead']} message(s) ahead of it, {pos['waiting_in_queue']} waiting in "
                f"{q['queue']}" if pos["in_list"] else
                f"  not waiting in {q['queue']} now ({pos['waiting_in_queue']} message(s) there)",
                markup=False, highlight=False)
        if not q["hosts"]:
            out("  [red]no live hosts[/] (no worker heartbeat in Redis)")
        for h in q["hosts"]:
            verdict = "[green]could run it[/]" if h["could_run"] else "[red]cannot[/]: " + escape("; ".join(h["reasons"]))
            out(f"  {escape(h['host'])}: {verdict}", highlight=False)
        for c in q["capable"]:
            busy = "; ".join(f"{b['name']} ({b['queue']})" for b in c["busy_with"])
            ahead = c["waiting_in_queues_it_serves_first"]
            out(f"  {c['host']} " + (f"is busy with: {busy}" if busy else "is idle") + (f"; {ahead} message(s) wait in queues it serves first"
                                                         if ahead else ""), markup=False, highlight=False)
