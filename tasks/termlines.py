"""A job's output bytes as a terminal shows them: one line per newline, its last segment.

Progress bars (tqdm, and Hugging Face's and Lightning's built on it) redraw with a carriage
return and no newline, and the worker reads stderr merged into stdout, so a metric line
printed while a bar is open arrives as ``\\r 45%|###  | 45/100 [...]FLEET_METRIC {...}``, and a
bar redrawn between a print's text and its newline puts ``\\r 46%|...`` after it. A
terminal shows a line's last segment (the text after its last ``\\r``); so do the tail and
`fleet logs`. A segment holding ``FLEET_METRIC `` anywhere is a line of its own even when a
later segment overwrites it, so no metric line is lost to a redraw.

Pure and bounded: ``Splitter`` takes chunks of any size and keeps, of each segment, its first
``SHOWN_KEEP_BYTES`` (for the shown line) and, from its first metric prefix on,
``METRIC_KEEP_BYTES`` (enough that a longer metric line reads as too long); a segment of
gigabytes with no line break costs no more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from trainers.protocol import MAX_METRIC_LINE_CHARS, MAX_OUTPUT_LINE_CHARS, METRIC_PREFIX

PREFIX = METRIC_PREFIX.encode()
UTF8_MAX_BYTES = 4  # bytes of one character at most: a bound in characters, kept in bytes
SHOWN_KEEP_BYTES = UTF8_MAX_BYTES * (MAX_OUTPUT_LINE_CHARS + 1)
# a metric text kept whole up to its limit; one cut here is longer, so it reads TOO_LONG
METRIC_KEEP_BYTES = len(PREFIX) + UTF8_MAX_BYTES * (MAX_METRIC_LINE_CHARS + 1)
_BREAK = re.compile(rb"[\r\n]")
# escape sequences (colours, cursor moves, erasing) a bar may draw with: CSI, OSC, two-byte ESC
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences. A JSON string cannot hold a raw ESC, so no
    metric line loses a character of its own."""
    return _ANSI.sub("", text) if "\x1b" in text else text


class TermLine(NamedTuple):  # a tuple: one is made per line of output, at its speed
    """One line a terminal would show: ``shown`` (bounded, to the tail and the log) and, when
    it holds a metric prefix, ``metric``: its text from that prefix on (bounded)."""

    shown: str
    metric: str | None = None


@dataclass
class _Segment:
    """What is kept of the text between two line breaks (``\\r`` or ``\\n``)."""

    head: bytearray = field(default_factory=bytearray)  # its first SHOWN_KEEP_BYTES
    size: int = 0
    metric: bytearray | None = None  # from its first metric prefix on
    scanned: bytes = b""  # its last bytes while no prefix is found: one split over two chunks

    def add(self, data: bytes) -> None:
        if not data:
            return
        room = SHOWN_KEEP_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.size += len(data)
        if self.metric is not None:
            room = METRIC_KEEP_BYTES - len(self.metric)
            if room > 0:
                self.metric += data[:room]
            return
        joined = self.scanned + data
        at = joined.find(PREFIX)
        if at >= 0:
            self.metric = bytearray(joined[at : at + METRIC_KEEP_BYTES])
            self.scanned = b""
        else:
            self.scanned = joined[-(len(PREFIX) - 1) :]

    def blank(self) -> bool:
        return not _shown(self.head, self.size).strip()

    def line(self) -> TermLine:
        return _line(self.head, self.size, self.metric)


def _shown(head: bytes, size: int) -> str:
    text = strip_ansi(head.decode("utf-8", "replace"))
    if len(text) <= MAX_OUTPUT_LINE_CHARS and size == len(head):
        return text
    note = f"... [cut: the line had {size} bytes]"
    return text[: MAX_OUTPUT_LINE_CHARS - len(note)] + note


def _line(head: bytes, size: int, metric: bytes | None) -> TermLine:
    """The line a segment shows: ``head`` its first bytes of ``size``, ``metric`` its bytes
    from its first prefix on."""
    return TermLine(
        _shown(head, size),
        None if metric is None else strip_ansi(metric.decode("utf-8", "replace")),
    )


class Splitter:
    """Feed it a job's output in chunks; it returns the lines a terminal shows, in order.

    A ``\\n`` ends a line: it shows its last segment with text in it (a bar wiped with spaces
    still shows its last state). A segment holding a metric prefix is its own line at once
    (the segments before it are overwritten). ``\\r\\n`` ends a line like ``\\n``."""

    def __init__(self) -> None:
        self._seg = _Segment()
        self._last: _Segment | None = None  # this line's last segment with text, overwritten
        self._said = False  # this line already gave a line (a metric segment)

    def feed(self, data: bytes) -> list[TermLine]:
        if b"\r" in data:
            return self._segments(data)
        # no carriage return: the plain lines a job prints most, each its own segment whole
        out: list[TermLine] = []
        lines = data.split(b"\n")
        rest = lines.pop()
        if lines and (self._seg.size or self._last is not None or self._said):
            out += self._segments(lines.pop(0) + b"\n")  # the end of a line begun before
        for raw in lines:
            if len(raw) > SHOWN_KEEP_BYTES:
                out += self._segments(raw + b"\n")
            else:
                at = raw.find(PREFIX)
                out.append(_line(raw, len(raw), None if at < 0 else raw[at:]))
        self._seg.add(rest)
        return out

    def _segments(self, data: bytes) -> list[TermLine]:
        out: list[TermLine] = []
        start = 0
        for brk in _BREAK.finditer(data):
            self._seg.add(data[start : brk.start()])
            out += self._close(newline=brk.group() == b"\n")
            start = brk.end()
        self._seg.add(data[start:])
        return out

    def finish(self) -> list[TermLine]:
        """The last line, when the output ended without a newline."""
        if self._seg.size or self._last is not None:
            return self._close(newline=True)
        return []

    def _close(self, newline: bool) -> list[TermLine]:
        seg, self._seg = self._seg, _Segment()
        out: list[TermLine] = []
        if seg.metric is not None:
            out.append(seg.line())
            self._said, self._last = True, None
        elif not seg.blank():
            self._last = seg
        if not newline:
            return out
        if self._last is not None:
            out.append(self._last.line())
        elif not self._said:  # an empty line (or only spaces) is a line too
            out.append(seg.line())
        self._last, self._said = None, False
        return out


def split(data: bytes) -> list[TermLine]:
    """All of ``data`` as a terminal shows it (one chunk; the last line need not end)."""
    splitter = Splitter()
    return splitter.feed(data) + splitter.finish()
