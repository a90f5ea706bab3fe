"""The report's colours and legend room: one colour per meaning in every chart (the phases,
idle, exposed communication), a chart's own colours (the critical path's kinds), the palette
for the rest, and the room a legend's rows take above a plot."""

from __future__ import annotations

PALETTE = [
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
]
#: One colour per meaning in every chart (the phases, idle, exposed communication): a series
#: named so is drawn in it whichever chart it is in; other series take the palette in turn.
MEANING = {
    "forward": "#4c78a8",
    "backward": "#f58518",
    "optimizer": "#54a24b",
    "recompute": "#72b7b2",
    "unattributed": "#9d755d",
    "exposed comm": "#e45756",
    "idle": "#bab0ac",
}
#: Legend rows: about this many pixels per character of an entry, plus its symbol, in a row
#: of this many pixels (a chart in the report's two columns is ~450 px wide at 1,300).
LEGEND_CHAR_PX, LEGEND_ITEM_PX, LEGEND_ROW_PX = 7, 40, 450


def colours(traces: list[dict], colors: dict[str, str] | None = None) -> None:
    """Each trace's colour: a series value the chart gives a colour (``colors``, such as the
    critical path's kinds) takes it; a series named for a meaning (:data:`MEANING`: ``forward``,
    ``idle``...) takes its colour, the same in every chart; the others take the palette in
    turn, skipping the colours the chart's meaning series took."""
    own = colors or {}
    word = [(t["meta"]["series"] or [""])[-1] for t in traces]
    taken = {MEANING[t["name"]] for t in traces if t["name"] in MEANING} | {own[w] for w in word if w in own}
    free = [c for c in PALETTE if c not in taken] or PALETTE
    i = 0
    for t, w in zip(traces, word):
        if w in own:
            t["marker"] = {"color": own[w]}
        elif t["name"] in MEANING:
            t["marker"] = {"color": MEANING[t["name"]]}
        else:
            t["marker"] = {"color": free[i % len(free)]}
            i += 1


def top_margin(names: list[str]) -> int:
    """Pixels above the plot for the title and the legend's rows under it (a legend of many
    series, per step, wraps onto more rows, which would otherwise cover the title)."""
    rows, used = 1, 0
    for n in names:
        w = LEGEND_ITEM_PX + LEGEND_CHAR_PX * len(n)
        if used and used + w > LEGEND_ROW_PX:
            rows, used = rows + 1, 0
        used += w
    return 70 + 22 * rows
