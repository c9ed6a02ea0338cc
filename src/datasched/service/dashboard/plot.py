"""The request page's plot, drawn on the server as SVG geometry (no chart library): the
events done against the time since the request's first packet, one step per sample of the
progress (a packet, or past :data:`~datasched.service.dashboard.views.PLOT_POINTS` of them a
run of packets stored one after another), with the events to do as a dashed line. The
template turns the geometry into ``<svg>``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Plot", "Tick", "progress_plot"]

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 12, 36


@dataclass(frozen=True, slots=True)
class Tick:
    """An axis tick: its position in the drawing and its label."""

    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Plot:
    """The drawing: its size, the plot area, the step line's points (``"x,y x,y ..."``),
    the height of the events-to-do line, and the ticks of both axes."""

    width: int
    height: int
    left: int
    top: int
    right: int
    bottom: int
    points: str
    total_y: float
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    description: str


def _nice_step(span: float, count: int = 4) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving about ``count`` ticks."""
    if span <= 0:
        return 1.0
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)


def _label(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.3g}"


def progress_plot(samples: Sequence[tuple[float, int]], events_total: int, packets: int) -> Plot:
    """The events done over time; ``samples``: ``(seconds after the first packet, events
    done by then)`` in time order (:func:`~datasched.service.dashboard.views.request_packets`
    gives them), of ``packets`` packets in all."""
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM
    t_max = max([t for t, _ in samples], default=0.0) or 1.0
    done = samples[-1][1] if samples else 0
    y_max = float(max(events_total, done, 1))

    def x(t: float) -> float:
        return LEFT + (right - LEFT) * t / t_max

    def y(events: float) -> float:
        return bottom - (bottom - TOP) * events / y_max

    points = [(x(0.0), y(0.0))]
    before = 0
    for t, after in samples:
        points.append((x(t), y(before)))
        points.append((x(t), y(after)))
        before = after
    x_step, y_step = _nice_step(t_max), _nice_step(y_max)
    x_ticks = tuple(
        Tick(round(x(k * x_step), 1), _label(k * x_step)) for k in range(int(t_max / x_step) + 1)
    )
    y_ticks = tuple(
        Tick(round(y(k * y_step), 1), _label(k * y_step)) for k in range(int(y_max / y_step) + 1)
    )
    return Plot(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        top=TOP,
        right=right,
        bottom=bottom,
        points=" ".join(f"{a:.1f},{b:.1f}" for a, b in points),
        total_y=round(y(events_total), 1),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        description=(
            f"{done} of {events_total} events done in {packets} packets "
            f"over {max([t for t, _ in samples], default=0.0):.1f} s"
        ),
    )
