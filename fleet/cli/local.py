"""`fleet local`: a whole local fleet on embedded defaults (and `--stop` for one kept running)."""
from __future__ import annotations

from pathlib import Path

from fleet.cli.common import console

DEFAULT_ROOT = ".fleet-local"


def cmd_local(args) -> int:
    if args.stop:
        from fleet.kept import stop
        return stop(Path(args.root).resolve(), console)
    from fleet.local import run_local
    return run_local(args.manifest, keep=args.keep, timeout_s=args.timeout, root=args.root)


def register(sub) -> None:
    s = sub.add_parser("local", help="run a whole local fleet on embedded defaults")
    s.add_argument("manifest", nargs="?", default="examples/manifest.toml")
    s.add_argument("--keep", action="store_true",
                   help="leave Redis and workers running; prints the export lines and the stop command")
    s.add_argument("--stop", action="store_true", help="stop a fleet left running by --keep")
    s.add_argument("--root", default=DEFAULT_ROOT, help=f"the local fleet's folder (default {DEFAULT_ROOT})")
    s.add_argument("--timeout", type=float, default=900.0)
    s.set_defaults(fn=cmd_local)
