"""One environment variable fleet reads: its name, its kind, its default, its doc, whether it
is a secret; and the kinds, each one parser used for every variable of that kind.

Code reads a variable by its declaration, typed by its kind: ``FLEET_LEASE_TTL_S.value()``
is a float (``from core.registry import FLEET_LEASE_TTL_S``: a misspelt name fails at
import), ``.value(env)`` reads another environment, ``.name`` is the variable's name.

An empty value counts as unset (``FLEET_X=`` gives the default). A bad value raises
ConfigError naming the variable, the value and the fix:
``FLEET_YIELD='maybe': expected 1 or 0 (yes/no, true/false, on/off), e.g. FLEET_YIELD=1``.
Declarations live in ``core.registry``; this module holds no variable of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from core.errors import ConfigError

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
T = TypeVar("T")


class Source(str, Enum):
    """Where an effective value came from."""

    ENV = "env"
    DEFAULT = "default"


class Scope(str, Enum):
    """Who reads a variable: fleet's own processes, or a job fleet starts (the trainers'
    contract)."""

    FLEET = "fleet"
    JOB = "given to jobs"


@dataclass(frozen=True)
class Kind(Generic[T]):
    """A type of value: ``convert`` turns the text into it or raises ValueError; ``expected``
    says what is accepted, for the error and the doc."""

    name: str
    convert: Callable[[str], T]
    expected: str


def _bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(word)


def _number(kind: type, *, least: float, above: bool) -> Callable[[str], Any]:
    def convert(raw: str):
        value = kind(raw.strip())
        if value < least or (above and value == least):
            raise ValueError(raw)
        return value

    return convert


def _url(raw: str) -> str:
    text = raw.strip()
    scheme, sep, rest = text.partition("://")
    if not (sep and scheme and rest):
        raise ValueError(raw)
    return text


def _names(raw: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in raw.split(",") if n.strip())


@dataclass(frozen=True)
class PortRange:
    """TCP ports ``first`` to ``last``, both included; written ``first-last``."""

    first: int
    last: int

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"

    @property
    def ports(self) -> range:
        return range(self.first, self.last + 1)


def _ports(raw: str) -> PortRange:
    first, sep, last = raw.strip().partition("-")
    ports = PortRange(int(first), int(last) if sep else int(first))
    if not 1 <= ports.first <= ports.last <= 65535:
        raise ValueError(raw)
    return ports


BOOL: Kind[bool] = Kind("bool", _bool, "1 or 0 (yes/no, true/false, on/off)")
SECONDS: Kind[float] = Kind(
    "seconds", _number(float, least=0, above=True), "a number of seconds > 0"
)
SECONDS_OR_ZERO: Kind[float] = Kind(
    "seconds", _number(float, least=0, above=False), "a number of seconds >= 0"
)
GIB: Kind[float] = Kind("GiB", _number(float, least=0, above=True), "a number of GiB > 0")
MIB: Kind[float] = Kind("MiB", _number(float, least=0, above=True), "a number of MiB > 0")
GIB_OR_ZERO: Kind[float] = Kind("GiB", _number(float, least=0, above=False), "a number of GiB >= 0")
COUNT: Kind[int] = Kind("count", _number(int, least=0, above=False), "a whole number >= 0")
URL: Kind[str] = Kind("URL", _url, "a URL, scheme://...")
TEXT: Kind[str] = Kind("text", str.strip, "text")
PATH: Kind[str] = Kind("path", str.strip, "a path")
NAMES: Kind[tuple[str, ...]] = Kind("names", _names, "comma-separated names")
PORTS: Kind[PortRange] = Kind(
    "ports", _ports, "a TCP port range FIRST-LAST (or one port) within 1-65535"
)


def text(value: Any) -> str:
    """A value as it is written in the environment: 1/0, 60 (not 60.0), a,b."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One variable. ``default`` is the value when unset (a named constant with its unit;
    None where there is none, and the declaration's type says ``| None``); ``default_doc``
    says it in words where it is worked out at run time (the host's name)."""

    name: str
    kind: Kind
    default: T
    doc: str
    secret: bool = False
    scope: Scope = Scope.FLEET
    example: str = ""
    default_doc: str = ""

    def parse(self, raw: str) -> T:
        """``raw`` as this setting's kind; ConfigError naming the variable and the fix."""
        try:
            return self.kind.convert(raw)
        except ValueError:
            shown = "***" if self.secret else repr(raw)
            raise ConfigError(
                f"{self.name}={shown}: expected {self.kind.expected}, e.g. "
                f"{self.name}={self.example_value}, or unset it for the default "
                f"({self.default_text})"
            ) from None

    def value(self, env: Mapping[str, str] | None = None) -> T:
        """The effective value in ``env`` (default: this process's environment)."""
        return self.read(os.environ if env is None else env)[0]

    def source(self, env: Mapping[str, str] | None = None) -> Source:
        """Whether it was set in ``env`` or falls back to its default."""
        return self.read(os.environ if env is None else env)[1]

    def read(self, env: Mapping[str, str]) -> tuple[T, Source]:
        """The effective value in ``env`` and where it came from."""
        raw = env.get(self.name, "")
        if not raw.strip():
            return self.default, Source.DEFAULT
        return self.parse(raw), Source.ENV

    @property
    def default_text(self) -> str:
        """The default as the doc and the errors say it."""
        if self.default_doc:
            return self.default_doc
        return "unset" if self.default is None else text(self.default)

    @property
    def example_value(self) -> str:
        if self.example:
            return self.example
        return "1" if self.kind is BOOL else self.default_text
