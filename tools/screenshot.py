"""Draw the dashboard as a PNG for the docs, fed with the deterministic event script of the TUI snapshot
tests (tests/tui/script.py): the picture in docs/ is the screen the snapshot tests check.

    python tools/screenshot.py [--size 100x30] [--crop sharing|none] [--external 2] [--out docs/sharing-panel.png]

The screen is Textual's own render (what `export_screenshot` turns into SVG), drawn cell by cell with
Pillow in DejaVu Sans Mono (matplotlib's copy): no browser and no SVG converter needed. `--crop sharing` keeps the rows from
the sharing panel to the bottom of the reward chart (the chart holds the solo curve the panel refers to).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from rich.cells import cell_len
from rich.color import Color
from rich.console import Console
from rich.segment import Segment

ROOT = Path(__file__).resolve().parents[1]
FONT_SIZE = 16
CELL = (10, 20)
"""Pixels a terminal cell takes at FONT_SIZE: DejaVu Sans Mono advances 9.6 px, its block glyphs span 20 px."""
DEFAULT_FG, DEFAULT_BG = (224, 224, 224), (30, 30, 30)


def screen_lines(app) -> list[list[Segment]]:
    """The app's screen as lines of styled segments, exactly as `export_screenshot` records them."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, color_system="truecolor",
                      record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    drawn = [segment for segment in console._record_buffer if not segment.control]  # cursor moves draw nothing
    return list(Segment.split_and_crop_lines(drawn, width, pad=True, include_new_lines=False))


def rgb(color: Color | None, default: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(color.get_truecolor()) if color is not None else default


def colors(style) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    fg, bg = rgb(style.color if style else None, DEFAULT_FG), rgb(style.bgcolor if style else None, DEFAULT_BG)
    if style and style.reverse:
        fg, bg = bg, fg
    if style and style.dim:  # as a terminal dims: halfway to the background
        fg = tuple((f + b) // 2 for f, b in zip(fg, bg))
    return fg, bg


def fonts() -> Path:
    """matplotlib's copy of DejaVu Sans Mono (the test extra installs matplotlib): the same font everywhere."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def draw(lines: list[list[Segment]]) -> Image.Image:
    width = max(sum(cell_len(s.text) for s in line) for line in lines)
    image = Image.new("RGB", (width * CELL[0], len(lines) * CELL[1]), DEFAULT_BG)
    pen = ImageDraw.Draw(image)
    regular, bold = (ImageFont.truetype(str(fonts() / name), FONT_SIZE)
                     for name in ("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf"))
    for row, line in enumerate(lines):
        column = 0
        for segment in line:
            fg, bg = colors(segment.style)
            font = bold if segment.style and segment.style.bold else regular
            for char in segment.text:
                cells = cell_len(char)
                if not cells:
                    continue  # a zero-width character (a joiner): nothing to draw
                x, y = column * CELL[0], row * CELL[1]
                pen.rectangle((x, y, x + cells * CELL[0] - 1, y + CELL[1] - 1), fill=bg)
                if char.strip():
                    pen.text((x, y + 1), char, font=font, fill=fg)
                if segment.style and segment.style.underline:
                    pen.line((x, y + CELL[1] - 2, x + cells * CELL[0], y + CELL[1] - 2), fill=fg)
                column += cells
    return image


async def render(size: tuple[int, int], crop: str, external: int) -> Image.Image:
    sys.path.insert(0, str(ROOT))
    from swarm_app.tui.app import SwarmApp
    from swarm_app.tui.sharing import SharingPanel
    from tests.tui.script import T0, dashboard_script, scripted

    app = SwarmApp(scripted(dashboard_script(external=external), asyncio.Event()), subtitle="/runs/demo", clock=lambda: T0 + 25)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.flush()
        await pilot.pause()
        lines = screen_lines(app)
        if crop == "sharing":
            top, bottom = app.query_one(SharingPanel).region.y, app.query_one("#chart").region.bottom
            lines = lines[top:bottom]
    return draw(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100x30", help="terminal columns x rows (default 100x30)")
    parser.add_argument("--crop", choices=("sharing", "none"), default="sharing")
    parser.add_argument("--external", type=int, default=2, help="J of the scripted node (0: it learns alone)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "sharing-panel.png"))
    args = parser.parse_args()
    columns, rows = (int(n) for n in args.size.split("x"))
    image = asyncio.run(render((columns, rows), args.crop, args.external))
    image.save(args.out, optimize=True)
    print(f"wrote {args.out} ({image.width}x{image.height})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
