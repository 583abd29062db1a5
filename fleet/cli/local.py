"""`fleet local`: a whole local fleet on embedded defaults."""
from __future__ import annotations


def cmd_local(args) -> int:
    from fleet.local import run_local
    return run_local(args.manifest, keep=args.keep, timeout_s=args.timeout)


def register(sub) -> None:
    s = sub.add_parser("local", help="run a whole local fleet on embedded defaults")
    s.add_argument("manifest", nargs="?", default="examples/manifest.toml")
    s.add_argument("--keep", action="store_true", help="leave Redis and workers running")
    s.add_argument("--timeout", type=float, default=900.0)
    s.set_defaults(fn=cmd_local)
