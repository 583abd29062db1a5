"""redis-py, imported by a `fleet` command without OpenTelemetry's SDK.

redis-py 7.2 and later import the OpenTelemetry metrics SDK from ``redis/__init__`` whenever
it is installed (mlflow-skinny brings it), to offer metrics that only an explicit
``redis.observability`` set-up turns on; fleet never turns them on. That import is about a
third of redis-py's own (some 100 ms of CPU of a `fleet status` that should answer at once),
and redis-py has no switch for it: its modules import OpenTelemetry in a ``try`` and, on an
``ImportError``, take it as not installed, as on a host without it.

:func:`install` puts a finder first on ``sys.meta_path`` that, when the command first imports
``redis``, runs redis-py's package with ``opentelemetry`` hidden (its ``sys.modules`` entry
set to ``None``, which makes importing it raise ``ImportError``) and shows it again once
``redis`` is loaded: every later importer, such as `fleet export mlflow`'s MLflow, gets
OpenTelemetry as usual. A process that loaded OpenTelemetry before redis-py gets redis-py as
it is, and so does one whose redis-py cannot load without OpenTelemetry (only slower).
``tests/unit/test_redis_import.py`` pins what redis-py does under it.
"""

from __future__ import annotations

import importlib.util
import sys

HIDDEN = "opentelemetry"
REDIS = "redis"

# The finder and the loader follow importlib's protocols without its ABCs: importlib.abc
# imports importlib.resources, tempfile and random (a tenth of `fleet status`'s own imports).


class _Hiding:
    """A package's own loader, run with OpenTelemetry hidden."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            if HIDDEN in sys.modules:  # already loaded: the package may as well use it
                self.loader.exec_module(module)
            else:
                self._exec_hiding(module)
        finally:  # loaded: the package names its own loader, as an ordinary import leaves it
            module.__loader__ = module.__spec__.loader = self.loader

    def _exec_hiding(self, module) -> None:
        sys.modules[HIDDEN] = None
        try:
            self.loader.exec_module(module)
        except ImportError as e:
            if (e.name or "").partition(".")[0] != HIDDEN:
                raise
            needs_it = True  # this version imports it outside a ``try``: load it as it is
        else:
            needs_it = False
        finally:
            if sys.modules.get(HIDDEN, ...) is None:
                del sys.modules[HIDDEN]
        if needs_it:
            self.loader.exec_module(module)


class _Finder:
    """Finds ``package`` once, as the rest of ``sys.meta_path`` does, with the hiding loader."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, name, path, target=None):
        if name != self.package:
            return None
        sys.meta_path.remove(self)  # once: find_spec below must not find this finder again
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Hiding(spec.loader)
        return spec


def install(package: str = REDIS) -> None:
    """Make this process's first import of ``package`` (redis-py) skip OpenTelemetry; nothing
    if it is already loaded or the finder already waits for it."""
    waiting = any(isinstance(f, _Finder) and f.package == package for f in sys.meta_path)
    if package not in sys.modules and not waiting:
        sys.meta_path.insert(0, _Finder(package))
