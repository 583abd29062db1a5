"""The `fleet` command: publish manifests, watch jobs, cancel and requeue, run a local fleet."""
from __future__ import annotations

import argparse
import json
import sys
import time

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fleet.errors import FleetError, ManifestError

console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _app():
    from tasks import app  # imports celeryconfig: env errors surface here, named
    return app


def _redis():
    import redis
    return redis.Redis.from_url(_app().conf.broker_url, socket_connect_timeout=5, socket_timeout=30)


def _records():
    from fleet.records import Records
    return Records(_redis())


def _plain(*values: str) -> list[Text]:
    """Table cells shown as written: a sweep name like gbt[seed=1] is not rich markup."""
    return [Text(str(v)) for v in values]


def cmd_publish(args) -> int:
    import redis
    from fleet.publish import publish
    from manifest.loader import load
    try:
        manifest = load(args.manifest)
    except ManifestError as e:
        if args.json:
            print(json.dumps({"error": "invalid manifest", "problems": [p.as_dict() for p in e.problems]}, indent=2))
        else:
            err.print(f"[bold red]{args.manifest}: {len(e.problems)} problem(s); nothing was published[/]")
            for p in e.problems:
                err.print(f"  {p}", markup=False, highlight=False)
        return 2
    names = {j.name for j in manifest.jobs} | {j.job_id for j in manifest.jobs}
    unknown = [n for n in args.force if n not in names]
    if unknown:
        err.print(f"--force names no job in {args.manifest}: {', '.join(unknown)}", markup=False)
        return 2
    try:
        rows = publish(_app(), _redis(), manifest, force=frozenset(args.force), dry_run=args.dry_run)
    except (redis.ConnectionError, redis.TimeoutError):
        if not args.dry_run:
            raise
        from fleet.publish import plan
        # A plan is still useful offline: it shows routing and IDs, not what already ran.
        err.print(f"fleet: cannot reach Redis at {_where(_app().conf.broker_url)} (FLEET_BROKER_URL): "
                  "the plan below assumes no job was published before", markup=False, highlight=False)
        rows = plan(manifest, {}, frozenset(args.force))
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
        return 0
    table = Table(title=("plan (dry run: nothing sent)" if args.dry_run else f"published {args.manifest}"))
    for col in ("job", "id", "queue", "action", "why"):
        table.add_column(col)
    for r in rows:
        table.add_row(*_plain(r.job.name, r.job.job_id[:12], r.queue, r.action, r.why))
    console.print(table)
    sent = sum(r.action == "publish" for r in rows)
    console.print(f"{sent} to publish, {len(rows) - sent} skipped" if args.dry_run else
                  f"{sent} published, {len(rows) - sent} skipped")
    return 0


def cmd_capability(args) -> int:
    from fleet.cluster import ClusterConfig, read_config
    from routing.detect import detect
    cap = detect()
    try:
        config = read_config(_redis())
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


def _age(t: float | None) -> str:
    return "" if not t else f"{time.time() - t:.0f}s ago"


def cmd_status(args) -> int:
    recs = _records().all()
    if args.json:
        print(json.dumps([r.to_dict() for r in recs], indent=2, default=str))
        return 0
    table = Table(title=f"{len(recs)} job(s)")
    for col in ("job", "id", "state", "queue", "tries", "worker", "progress / error", "artifact"):
        table.add_column(col, overflow="fold")
    for r in recs:
        note = ""
        if r.state.value == "running" and r.progress:
            m = r.progress.get("metrics") or {}
            note = f"{r.progress.get('elapsed_s', 0):.0f}s " + " ".join(f"{k}={v}" for k, v in list(m.items())[:3])
        elif r.last_error:
            note = r.last_error.splitlines()[0][:80]
        art = (r.artifact or {}).get("sha256", "")[:12]
        table.add_row(*_plain(r.name, r.job_id[:12], r.state.value, r.queue, str(r.attempts), r.worker or "", note,
                              art))
    console.print(table)
    return 0


def cmd_show(args) -> int:
    rec = _records()
    print(json.dumps(rec.get(rec.resolve(args.job)).to_dict(), indent=2, default=str))
    return 0


def cmd_cancel(args) -> int:
    rec = _records()
    jid = rec.resolve(args.job)
    res = rec.cancel(jid)
    if res.startswith("ok:"):
        console.print(f"cancelled {args.job} (was {res[3:]})", markup=False)
        return 0
    err.print(f"{args.job} is {res}: only queued or running jobs can be cancelled", markup=False)
    return 1


def cmd_requeue(args) -> int:
    rec = _records()
    jid = rec.resolve(args.job)
    prior = rec.requeue(jid)
    if prior in ("queued", "running"):
        err.print(f"{args.job} is {prior}: requeue runs a failed, cancelled or succeeded job again", markup=False)
        return 1
    console.print(f"requeued {args.job} (was {prior})", markup=False)
    return 0


def cmd_artifacts(args) -> int:
    from artifacts.store import open_store
    store = open_store(args.store)
    arts = store.list_artifacts()
    table = Table(title=f"artifacts in {args.store or 'FLEET_STORE_URL'}")
    for col in ("job", "kind", "sha256", "size", "verified", "uri"):
        table.add_column(col, overflow="fold")
    ok = True
    for a in arts:
        kind = (a.get("job") or {}).get("model") or "command"
        verified = store.verify(kind, a["sha256"]) if args.verify else None
        ok = ok and verified is not False
        table.add_row(*_plain(a.get("name", ""), kind, a["sha256"][:16], f"{a.get('size', 0):,}"),
                      {True: "[green]sha256 ok[/]", False: "[red]MISMATCH[/]", None: "-"}[verified], _plain(a["uri"])[0])
    console.print(table)
    return 0 if ok else 1


def cmd_local(args) -> int:
    from fleet.local import run_local
    return run_local(args.manifest, keep=args.keep, timeout_s=args.timeout)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleet", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("publish", help="validate a manifest and queue its jobs")
    s.add_argument("manifest")
    s.add_argument("--dry-run", action="store_true", help="print the plan; send nothing")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--force", action="append", default=[], metavar="NAME", help="run this job again")
    s.set_defaults(fn=cmd_publish)
    s = sub.add_parser("capability", help="this host's capability and the queues it serves")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_capability)
    s = sub.add_parser("status", help="every job's state")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_status)
    for name, fn, text in (("show", cmd_show, "one job's whole record"),
                           ("cancel", cmd_cancel, "cancel a queued or running job"),
                           ("requeue", cmd_requeue, "run a failed, cancelled or succeeded job again")):
        s = sub.add_parser(name, help=text)
        s.add_argument("job", help="job name, ID or ID prefix")
        s.set_defaults(fn=fn)
    s = sub.add_parser("artifacts", help="list (and verify) artifacts in the store")
    s.add_argument("--store", default=None, help="store URL (default: FLEET_STORE_URL)")
    s.add_argument("--no-verify", dest="verify", action="store_false")
    s.set_defaults(fn=cmd_artifacts)
    s = sub.add_parser("local", help="run a whole local fleet on embedded defaults")
    s.add_argument("manifest", nargs="?", default="examples/manifest.toml")
    s.add_argument("--keep", action="store_true", help="leave Redis and workers running")
    s.add_argument("--timeout", type=float, default=900.0)
    s.set_defaults(fn=cmd_local)
    return p


def _where(url: str) -> str:
    """A broker URL without its credentials, for messages."""
    return url.rsplit("@", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    import redis
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except FleetError as e:
        err.print(f"fleet: {e}", markup=False, highlight=False)
        return 1
    except (redis.ConnectionError, redis.TimeoutError):
        url = _app().conf.broker_url
        err.print(f"fleet: cannot reach Redis at {_where(url)} (FLEET_BROKER_URL); start it, or point "
                  "FLEET_BROKER_URL at your broker (`scripts/local-fleet` runs one locally)",
                  markup=False, highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
