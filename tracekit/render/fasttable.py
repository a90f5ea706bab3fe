"""A rich Table that prints the same bytes as :class:`rich.table.Table`, at a fraction of the cost.

rich measures every cell (to size columns) and renders every cell through a Padding and a Text
wrap, about 0.2 ms a cell: most of what ``tracekit analyze`` spent printing the tables of a large
trace. For the tables tracekit prints (heavy-head box, one line of padding each side, no footer,
no row styles) two shortcuts give the same segments:

* a column's width depends only on its widest line and its longest word, so rich measures the
  header and the two cells that hold those, not every cell;
* a cell whose text fits its column on one line (no spans, no tab or newline) is the text padded
  to the width (left- or right-justified) between two padding spaces, in the cell's style.
  Every other cell (one that wraps or folds) is rendered by rich itself.

Anything else (another box, footers, row styles, a cell that is not Text) goes to rich whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Column, Table
from rich.text import Text

_PADDING = (0, 1, 0, 1)


def _line_len(text: RenderableType) -> int:
    assert isinstance(text, Text)
    return max((cell_len(line) for line in text.plain.splitlines()), default=0)


def _word_len(text: RenderableType) -> int:
    assert isinstance(text, Text)
    return max((cell_len(word) for word in text.plain.split()), default=0)


class FastTable(Table):
    """:class:`rich.table.Table` whose columns are measured from their extreme cells and whose
    one-line cells are laid out directly (same output, module docstring)."""

    def _simple(self) -> bool:
        """The configuration the shortcuts reproduce exactly."""
        return (
            self.box is not None
            and self.show_header
            and self.show_edge
            and not (self.show_footer or self.show_lines or self.leading or self.row_styles)
            and self.padding == _PADDING
            and not self.collapse_padding
            and self.pad_edge
            and all(r.style is None and not r.end_section for r in self.rows)
            and all(isinstance(c, Text) for col in self.columns for c in col._cells)
        )

    def _measure_column(self, console: Console, options: ConsoleOptions, column: Column) -> Measurement:
        """rich's measurement of ``column``, from its header and the cells with the widest line
        and the longest word (a column's measure is the largest of each over its cells)."""
        cells = column._cells
        if column.width is not None or len(cells) <= 2 or not self._simple():
            return super()._measure_column(console, options, column)
        widest = max(cells, key=_line_len)
        longest = max(cells, key=_word_len)
        proxy = dataclasses.replace(column, _cells=[widest, longest])
        return super()._measure_column(console, options, proxy)

    def _render(self, console: Console, options: ConsoleOptions, widths: list[int]) -> RenderResult:
        if not self._simple():
            yield from super()._render(console, options, widths)
            return
        assert self.box is not None
        border = console.get_style(self.style or "") + console.get_style(self.border_style or "")
        box = self.box.substitute(
            options, safe=self.safe_box if self.safe_box is not None else console.safe_box
        )
        new_line = Segment.line()
        yield Segment(box.get_top(widths), border)
        yield new_line
        head = console.get_style(self.header_style or "")
        header = [(head + console.get_style(c.header_style), c.header) for c in self.columns]
        yield from self._row(console, options, widths, header, box, border, 0)
        yield Segment(box.get_row(widths, "head", edge=True), border)
        yield new_line
        styles = [console.get_style(c.style or "") for c in self.columns]
        n = len(self.rows)
        for i in range(n):
            cells = [(s, c._cells[i]) for s, c in zip(styles, self.columns)]
            yield from self._row(console, options, widths, cells, box, border, 2 if i == n - 1 else 1)
        yield Segment(box.get_bottom(widths), border)
        yield new_line

    def _row(self, console, options, widths, cells, box, border, edges: int) -> Iterator[Segment]:
        """One row: its cells' lines aligned (headers at the bottom, others at the top) between
        the box's edges and dividers (``edges``: 0 head, 1 mid, 2 foot, as rich picks them)."""
        rendered = [
            self._cell(console, options, width, column, style, renderable)
            for width, column, (style, renderable) in zip(widths, self.columns, cells)
        ]
        row_height = max(len(lines) for lines in rendered)
        height = max(row_height, 1)
        if any(len(lines) != 1 for lines in rendered):  # rich's alignment and shaping
            align = Segment.align_bottom if edges == 0 else Segment.align_top
            rendered = [
                Segment.set_shape(align(lines, width, row_height, style), width, height)
                for lines, width, (style, _) in zip(rendered, widths, cells)
            ]
        left = Segment((box.head_left, box.mid_left, box.foot_left)[edges], border)
        right = Segment((box.head_right, box.mid_right, box.foot_right)[edges], border)
        divider = Segment((box.head_vertical, box.mid_vertical, box.foot_vertical)[edges], border)
        for line_no in range(height):
            yield left
            for k, lines in enumerate(rendered):
                if k:
                    yield divider
                yield from lines[line_no]
            yield right
            yield Segment.line()

    @staticmethod
    def _cell(console, options, width: int, column: Column, style: Style, renderable) -> list[list[Segment]]:
        """A cell's lines at ``width`` (padding included), as rich renders them: laid out here
        when its text fits on one line, else by rich."""
        line = _one_line(renderable, width - 2, column.justify)
        if line is not None:
            pad = Segment(" ", style)
            return [[pad, Segment(line, style), pad]]
        render_options = options.update(
            width=width,
            justify=column.justify,
            no_wrap=column.no_wrap,
            overflow=column.overflow,
            height=None,
            highlight=column.highlight,
        )
        return console.render_lines(Padding(renderable, _PADDING), render_options, style=style)


def _one_line(renderable, room: int, justify) -> str | None:
    """The text of a one-line cell justified in ``room`` as rich's wrap does it (left: padded
    on the right; right: trailing spaces dropped, padded on the left); None when rich must wrap."""
    if not isinstance(renderable, Text) or renderable.spans or renderable.style or renderable.justify:
        return None
    if room < 1 or justify not in ("left", "right"):
        return None
    plain = renderable.plain
    if "\n" in plain or "\t" in plain or cell_len(plain) > room:
        return None
    if justify == "left":
        return plain + " " * (room - cell_len(plain))
    plain = plain.rstrip()
    return " " * (room - cell_len(plain)) + plain
