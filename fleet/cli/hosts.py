"""Host verbs: `fleet capability` (this host and the queues it would serve)."""
from __future__ import annotations

import json

from fleet.cli.common import console, redis_client


def cmd_capability(args) -> int:
    from fleet.cluster import ClusterConfig, read_config
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
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_capability)
