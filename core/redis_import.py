"""redis-py, imported by a `fleet` command or a worker (``tasks``) without OpenTelemetry's SDK
and without the parts its synchronous client never runs.

redis-py 7.2 and later import the OpenTelemetry metrics SDK from ``redis/__init__`` whenever
it is installed (mlflow-skinny brings it), to offer metrics that only an explicit
``redis.observability`` set-up turns on; fleet never turns them on. That import is about a
third of redis-py's own (some 100 ms of CPU of a `fleet status` that should answer at once),
and redis-py has no switch for it: its modules import OpenTelemetry in a ``try`` and, on an
``ImportError``, take it as not installed, as on a host without it.

redis-py's ``__init__`` also runs its whole asyncio client (``from redis import asyncio``:
another quarter of its import), and its ``redis.utils`` imports ``importlib.metadata``, used
only to read redis-py's version for a client given none (``state.redis_conn`` gives it). Both
are bound by name there and used by nothing the synchronous client runs, so they are
*deferred* (:data:`DEFERRED`), and so is ``asyncio`` itself (some 30 modules, a tenth of
`fleet status`'s CPU), which redis-py's parsers and events import for the asyncio client
alone: the three names they take from it as they load are lent as stand-ins (:data:`LENT`)
and become asyncio's own when it runs. Each deferred module is an empty module with its
name and spec until the first use of it (any other attribute), which runs its code then, as
its import would have; a later importer (Celery, a test) gets the real module. While
redis-py loads, its own modules import submodules of a deferred package
(``redis.asyncio.observability``) without running the package; after, importing one runs the
package first, as an ordinary import does.

:func:`install` puts a finder first on ``sys.meta_path`` that, when the command first imports
``redis``, runs redis-py's package with ``opentelemetry`` hidden (its ``sys.modules`` entry
set to ``None``, which makes importing it raise ``ImportError``) and the deferred packages
deferred, and shows OpenTelemetry again once ``redis`` is loaded: every later importer, such
as `fleet export mlflow`'s MLflow, gets it as usual. A process that loaded OpenTelemetry before
redis-py gets redis-py with it. A redis-py that cannot load so (it imports OpenTelemetry
outside a ``try``, or uses a deferred package while it loads) is loaded again as it is, from
scratch: only slower. ``tests/unit/test_redis_import.py`` pins what redis-py does under it.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types

HIDDEN = "opentelemetry"
REDIS = "redis"
# bound by redis-py's import, run by nothing its synchronous client does
DEFERRED = ("redis.asyncio", "importlib.metadata", "asyncio")
# names a deferred package lends while redis-py loads, without running, and the base of the
# stand-in class it lends for each: redis-py's parsers do ``from asyncio import
# IncompleteReadError, StreamReader`` for their asyncio client alone (an ``except`` clause and
# an annotation). When the package runs, every module's binding of a stand-in becomes the
# real object, so code that can only run after it (an event loop needs asyncio) sees that.
LENT = {"asyncio": {"IncompleteReadError": EOFError, "StreamReader": object, "Lock": object}}

# The finders and loaders follow importlib's protocols without its ABCs: importlib.abc
# imports importlib.resources, tempfile and random (a tenth of `fleet status`'s own imports).


class _Later:
    """A deferred module's state: its own loader, and whether it runs, ran, or may still
    lend its ``__path__`` without running (while redis-py loads)."""

    def __init__(self, loader, lends: dict[str, type] | None = None):
        self.loader = loader
        self.lock = threading.RLock()  # a second thread waits for the first one's run
        self.running = False
        self.ran_early = False  # used while redis-py loaded: deferring it gained nothing
        self.lending_path = True
        self.lends = lends or {}  # name -> the base of its stand-in (LENT)
        self.lent: dict[str, type] = {}  # the stand-ins lent so far, by name

    def stand_in(self, module: str, name: str) -> type:
        if name not in self.lent:
            doc = f"{module}.{name}, lent while redis-py loaded: replaced once {module} runs"
            base = self.lends[name]
            self.lent[name] = type(name, (base,), {"__module__": module, "__doc__": doc})
        return self.lent[name]

    def swap_stand_ins(self, real) -> None:
        """Every module's binding of a stand-in lent, made the real object of ``real``."""
        mine = {id(v): getattr(real, k) for k, v in self.lent.items()}
        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", None)
            if type(names) is not dict:
                continue
            for k, v in list(names.items()):
                if id(v) in mine and isinstance(v, type):
                    names[k] = mine[id(v)]


# what the import system reads of a module without using it: these never run a deferred one
_MARKS = frozenset(
    ("__name__", "__spec__", "__loader__", "__package__", "__file__", "__cached__", "__class__")
)


class _Deferred(types.ModuleType):
    """A package whose own code has not run yet: the first attribute read that is not one of
    the import system's marks runs it (as importlib.util.LazyLoader does, which would run it
    for ``__path__`` too: redis-py imports a submodule of ``redis.asyncio`` as it loads)."""

    def __getattribute__(self, name):
        later = types.ModuleType.__getattribute__(self, "__spec__").loader_state
        if name in _MARKS or (name == "__path__" and later.lending_path):
            return types.ModuleType.__getattribute__(self, name)
        if name in later.lends and later.lending_path and not later.running:
            return later.stand_in(types.ModuleType.__getattribute__(self, "__name__"), name)
        with later.lock:
            if type(self) is _Deferred and not later.running:  # re-entered by its own run: as is
                later.running = True
                later.ran_early = later.lending_path
                try:
                    later.loader.exec_module(self)
                finally:
                    later.running = False
                self.__class__ = types.ModuleType
                self.__spec__.loader_state = None
                if later.lent:
                    later.swap_stand_ins(self)
        return types.ModuleType.__getattribute__(self, name)


class _Deferring:
    """A deferred module's loader: makes the module, runs none of it."""

    def __init__(self, loader, lends: dict[str, type] | None = None):
        self.later = _Later(loader, lends)

    def create_module(self, spec):
        return self.later.loader.create_module(spec)

    def exec_module(self, module) -> None:
        spec = module.__spec__
        module.__loader__ = spec.loader = self.later.loader  # as an ordinary import leaves it
        spec.loader_state = self.later
        module.__class__ = _Deferred


class _Deferrer:
    """The finder of the packages deferred while redis-py loads (found as the rest of
    ``sys.meta_path`` finds them); remembers what it deferred."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.made: list[_Later] = []

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or spec.submodule_search_locations is None:
            return spec  # a namespace or a plain module: imported as it is
        spec.loader = _Deferring(spec.loader, LENT.get(name))
        self.made.append(spec.loader.later)
        return spec

    def __enter__(self):
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc) -> None:
        sys.meta_path.remove(self)
        for later in self.made:  # a submodule imported from now on runs its package first
            later.lending_path = False

    def gained_nothing(self) -> bool:
        return any(later.ran_early for later in self.made)


class _Hiding:
    """A package's own loader, run with OpenTelemetry hidden and ``deferred`` deferred."""

    def __init__(self, loader, deferred: tuple[str, ...]):
        self.loader = loader
        self.deferred = deferred

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self._exec(module)
        finally:  # loaded: the package names its own loader, as an ordinary import leaves it
            module.__loader__ = module.__spec__.loader = self.loader

    def _exec(self, module) -> None:
        hide = HIDDEN not in sys.modules  # already loaded: the package may as well use it
        if hide:
            sys.modules[HIDDEN] = None
        deferrer = _Deferrer(self.deferred)
        try:
            with deferrer:
                self.loader.exec_module(module)
            return
        except ImportError as e:
            if not (hide and (e.name or "").partition(".")[0] == HIDDEN):
                if not deferrer.gained_nothing():
                    raise
        except Exception:
            if not deferrer.gained_nothing():
                raise
        finally:
            if hide and sys.modules.get(HIDDEN, ...) is None:
                del sys.modules[HIDDEN]
        # this version needs OpenTelemetry or a deferred package while it loads: as it is
        _forget(module, deferrer.names)
        self.loader.exec_module(module)


def _forget(module, deferred: tuple[str, ...]) -> None:
    """Undo a failed load of ``module``: its submodules, the modules deferred during it, and
    the names its code bound, so that loading it again starts afresh."""
    name = module.__name__
    for loaded in [m for m in sys.modules if m.startswith(f"{name}.")]:
        del sys.modules[loaded]
    for gone in deferred:
        if isinstance(sys.modules.get(gone), _Deferred):
            del sys.modules[gone]
            parent, _, child = gone.rpartition(".")
            if isinstance(getattr(sys.modules.get(parent), child, None), _Deferred):
                delattr(sys.modules[parent], child)
    for bound in [k for k in vars(module) if not k.startswith("__")]:
        del vars(module)[bound]


class _Finder:
    """Finds ``package`` once, as the rest of ``sys.meta_path`` does, with the hiding loader."""

    def __init__(self, package: str, deferred: tuple[str, ...]):
        self.package = package
        self.deferred = deferred

    def find_spec(self, name, path, target=None):
        if name != self.package:
            return None
        sys.meta_path.remove(self)  # once: find_spec below must not find this finder again
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Hiding(spec.loader, self.deferred)
        return spec


def install(package: str = REDIS, deferred: tuple[str, ...] = DEFERRED) -> None:
    """Make this process's first import of ``package`` (redis-py) skip OpenTelemetry and defer
    ``deferred``; nothing if it is already loaded or the finder already waits for it."""
    waiting = any(isinstance(f, _Finder) and f.package == package for f in sys.meta_path)
    if package not in sys.modules and not waiting:
        sys.meta_path.insert(0, _Finder(package, deferred))
