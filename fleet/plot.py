"""Draw `fleet plot`'s picture from ``fleet.query.plotdata.PlotData`` with matplotlib (Agg,
no display needed): learning curves on top (a PBT search's exploits crossed on them), then each
value over the steps per member (PBT's schedule), best-so-far and each parameter.

matplotlib is the optional ``plot`` extra; without it `fleet plot` says how to install it.
"""

from __future__ import annotations

import math
from pathlib import Path

from core.errors import FleetError
from fleet.query.plotdata import PlotData, curves_title
from state.jobrecord import JobState

FORMATS = (".png", ".svg", ".pdf")
PANELS_PER_ROW = 3
BEST_COLOR, DIM_ALPHA, CURVE_ALPHA = "tab:red", 0.15, 0.6


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise FleetError("fleet plot needs matplotlib: pip install 'fleet[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _curves(ax, data: PlotData) -> None:
    for c in data.curves:
        if not c.steps:
            continue
        if c.best:
            ax.plot(
                c.steps,
                c.values,
                color=BEST_COLOR,
                linewidth=2.5,
                zorder=3,
                label=f"best: trial {c.trial}",
            )
        else:
            ax.plot(
                c.steps,
                c.values,
                color="tab:blue" if not c.dimmed else "grey",
                alpha=DIM_ALPHA if c.dimmed else CURVE_ALPHA,
                linewidth=1,
                marker="." if len(c.steps) == 1 else None,  # a trial stopped at its first step
            )
    _marks(ax, data)
    ax.set(
        title=curves_title(data.curves),
        xlabel="step",
        ylabel=data.metric,
    )
    _whole_numbers(ax)
    if data.log_y:
        ax.set_yscale("log")
    if any(c.best and c.steps for c in data.curves) or data.marks:
        ax.legend(loc="best")


def _marks(ax, data: PlotData) -> None:
    """A PBT search's exploits: a cross where each member took another's checkpoint."""
    shown = [m for m in data.marks if m.value is not None]
    if shown:
        ax.scatter(
            [m.step for m in shown],
            [m.value for m in shown],
            marker="x",
            s=40,
            c="black",
            zorder=4,
            label=f"exploit ({len(data.marks)}): took a better member's checkpoint",
        )


def _schedule(ax, s, data: PlotData) -> None:
    """One value over the steps, per member (the schedule PBT found); the best member red."""
    for member, (steps, values) in sorted(s.members.items()):
        best = member == s.best
        ax.step(
            steps,
            values,
            where="post",
            color=BEST_COLOR if best else "tab:blue",
            alpha=1.0 if best else CURVE_ALPHA,
            linewidth=2.5 if best else 1,
            zorder=3 if best else 2,
            label=f"best: member {member}" if best else None,
        )
    if s.numeric:
        values = [v for _, vs in s.members.values() for v in vs]
        if values and min(values) > 0 and max(values) / min(values) >= 100:
            ax.set_yscale("log")
    ax.set(title=f"{s.name} over the steps", xlabel="step", ylabel=s.name)
    _whole_numbers(ax)
    if s.best is not None and s.best in s.members:
        ax.legend(loc="best")


def _whole_numbers(ax) -> None:
    """Steps and trial numbers are whole: no tick at 1.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _best_so_far(ax, data: PlotData) -> None:
    if data.finals:
        trials, values, states = zip(*data.finals, strict=True)
        ax.scatter(
            trials,
            values,
            c=["grey" if s != JobState.SUCCEEDED else "tab:blue" for s in states],
            s=12,
            alpha=0.6,
        )
    if data.best_so_far:
        ax.step(*zip(*data.best_so_far, strict=True), where="post", color=BEST_COLOR, linewidth=2)
    ax.set(title=f"best so far ({data.direction.value})", xlabel="trial", ylabel=data.metric)
    _whole_numbers(ax)
    if data.log_y:
        ax.set_yscale("log")


def _param(ax, p, data: PlotData) -> None:
    """One parameter against the final metric: finished trials blue, the ones that stopped
    short faint grey, the best a red star; a category's box over its finished trials."""
    if p.numeric:
        xs = p.values
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 100:
            ax.set_xscale("log")
    else:
        place = {label: i for i, label in enumerate(p.categories, start=1)}
        xs = [place[v] for v in p.values]
        groups = [
            [m for v, m, d in zip(p.values, p.metric, p.dimmed, strict=True) if v == c and not d]
            for c in p.categories
        ]
        shown = [(i, g) for i, g in enumerate(groups, start=1) if g]
        if shown:
            ax.boxplot([g for _, g in shown], positions=[i for i, _ in shown], showfliers=False)
        ax.set_xticks(range(1, len(p.categories) + 1), p.categories, rotation=30, fontsize=8)
    for dimmed, colour, alpha in ((True, "grey", DIM_ALPHA * 2), (False, "tab:blue", 0.7)):
        pick = [i for i, d in enumerate(p.dimmed) if d is dimmed and not p.best[i]]
        ax.scatter([xs[i] for i in pick], [p.metric[i] for i in pick], s=14, c=colour, alpha=alpha)
    best = [i for i, b in enumerate(p.best) if b]
    if best:
        ax.scatter(
            [xs[i] for i in best],
            [p.metric[i] for i in best],
            s=90,
            marker="*",
            c=BEST_COLOR,
            zorder=3,
            label="best",
        )
    if data.log_y:
        ax.set_yscale("log")
    ax.set(title=p.name, xlabel=p.name, ylabel=data.metric)


def figure(data: PlotData):
    """The matplotlib figure of ``data``."""
    plt = _pyplot()
    below = 1 + len(data.schedules) + len(data.params)
    rows = 1 + math.ceil(below / PANELS_PER_ROW)
    fig = plt.figure(figsize=(5 * PANELS_PER_ROW, 4 * rows), layout="constrained")
    grid = fig.add_gridspec(rows, PANELS_PER_ROW)
    _curves(fig.add_subplot(grid[0, :]), data)
    panels = [
        *(lambda ax, s=s: _schedule(ax, s, data) for s in data.schedules),
        lambda ax: _best_so_far(ax, data),
        *(lambda ax, p=p: _param(ax, p, data) for p in data.params),
    ]
    for i, draw in enumerate(panels):
        draw(fig.add_subplot(grid[1 + i // PANELS_PER_ROW, i % PANELS_PER_ROW]))
    fig.suptitle(f"{data.name}: {data.metric}")
    return fig


def save(data: PlotData, path: str | Path) -> Path:
    """Write the picture to ``path`` (.png, .svg or .pdf); the path written."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise FleetError(
            f"-o {path}: write a {', '.join(FORMATS)} file (the picture's format is its suffix)"
        )
    fig = figure(data)
    try:
        fig.savefig(path, dpi=100)
    finally:
        _pyplot().close(fig)
    return path
