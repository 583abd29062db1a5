"""``python -m tasks worker ...``: the command ``celery -A tasks worker ...``, with a fifth less
CPU to start.

Celery's command line loads every installed plugin command when it is imported: Flower's
(Tornado, its views and handlers) and, for its ``amqp`` shell, click-repl and prompt_toolkit.
A worker runs none of them, and they are some 0.3 s of CPU of each worker's start (of 1.3-1.45 s
with them), which `fleet local` and the test suite's hundreds of workers pay each time.
This runs the very same Celery command group, options and worker with the ``celery.commands``
plugins left out and the ``amqp`` shell's REPL not registered. Anything else (``inspect``,
``control``, ``flower``) goes through the ``celery`` command as usual.
"""

from __future__ import annotations

import sys
import types


def _plugin_free_celery():
    """Celery's ``celery`` command group, imported without its plugin commands and REPL."""
    import importlib.metadata as md

    entry_points = md.entry_points

    def no_celery_plugins(**kw):
        if kw.get("group") == "celery.commands":
            return md.EntryPoints(())
        return entry_points(**kw)

    repl = types.ModuleType("click_repl")  # celery.bin.amqp registers a REPL only a shell uses
    repl.register_repl = lambda group, name="repl": None
    had_repl = "click_repl" in sys.modules
    md.entry_points = no_celery_plugins
    sys.modules.setdefault("click_repl", repl)
    try:
        from celery.bin.celery import celery
    finally:
        md.entry_points = entry_points
        if not had_repl and sys.modules.get("click_repl") is repl:
            del sys.modules["click_repl"]  # a later importer gets the real one
    return celery


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["worker"]:
        print(
            "usage: python -m tasks worker [celery worker options]\n"
            "(the same as `celery -A tasks worker`; for anything else use `celery -A tasks`)",
            file=sys.stderr,
        )
        return 2
    from celery import maybe_patch_concurrency

    maybe_patch_concurrency(["celery", *args])  # what `celery` does first: -P eventlet/gevent
    return _plugin_free_celery().main(
        args=["-A", "tasks", *args], prog_name="celery", auto_envvar_prefix="CELERY"
    )


if __name__ == "__main__":
    sys.exit(main())
