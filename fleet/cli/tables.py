"""Tables that fit the terminal: some columns always whole, the others added in order while
they fit, one that may shrink cut with an ellipsis; ``--wide`` shows every column."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rich import box
from rich.table import Table

GAP = 3  # between columns: padding and the divider


@dataclass(frozen=True)
class Layout:
    """Which columns a table has, which always show, and in what order the rest are added."""

    columns: tuple[str, ...]  # in display order
    always: tuple[str, ...]  # whole, whatever the width
    optional: tuple[str, ...]  # added in this order while they fit
    # may be cut down to this many characters
    shrinks: Mapping[str, int] = field(default_factory=dict)
    right: tuple[str, ...] = ()  # right-justified

    def fit(
        self, natural: Mapping[str, int], width: int, drop: tuple[str, ...] = ()
    ) -> dict[str, int]:
        """The columns a ``width``-wide terminal shows and how wide: ``always`` whole, then each
        optional column but ``drop`` while it fits (one that shrinks takes what is left). Pure."""
        out = {c: natural[c] for c in self.always}
        used = sum(out.values()) + GAP * (len(out) - 1)
        for col in (c for c in self.optional if c not in drop):
            left = width - used - GAP
            take = min(natural[col], left) if left >= self.shrinks.get(col, natural[col]) else 0
            if take > 0:
                out[col] = take
                used += take + GAP
        return {c: out[c] for c in self.columns if c in out}

    def natural(self, rows: list[Mapping[str, object]]) -> dict[str, int]:
        """Each column's width with nothing cut: its widest cell or its header."""
        return {c: max([len(c)] + [len(str(cells[c])) for cells in rows]) for c in self.columns}

    def table(
        self,
        rows: list[Mapping[str, object]],
        width: int,
        wide: bool = False,
        drop: tuple[str, ...] = (),
    ) -> tuple[Table, dict[str, int]]:
        """The table for ``rows`` (cells by column) and the columns it shows (not ``drop``). With
        ``wide`` every column, folded rather than cut when the terminal is narrow."""
        widths = self.natural(rows) if wide else self.fit(self.natural(rows), width, drop)
        table = Table(expand=False, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for col, w in widths.items():
            table.add_column(
                col,
                no_wrap=not wide or col in self.always,
                overflow="fold" if wide else "ellipsis",
                width=None if wide else w,
                justify="right" if col in self.right else "left",
            )
        for cells in rows:
            table.add_row(*(cells[c] for c in widths))
        return table, widths
