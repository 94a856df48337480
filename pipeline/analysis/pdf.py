"""Render the report's blocks (`document`) to a PDF with fpdf2: real text tables, embedded PNG figures, bookmarked
headings, page numbers. fpdf2's core fonts are Latin-1 only, so the report uses matplotlib's DejaVu TTFs."""

from __future__ import annotations

from pathlib import Path

import matplotlib
from fpdf import FPDF
from fpdf.fonts import FontFace
from PIL import Image

from pipeline.analysis.document import Block, Bullets, Code, FigureBlock, Heading, Paragraph, TableBlock

FONT, MONO = "DejaVu", "DejaVuMono"
BODY_PT, TABLE_PT, MIN_TABLE_PT = 9.5, 7.5, 5.5
HEADING_PT = {0: 16, 1: 13, 2: 11}


def dejavu(name: str) -> Path:
    return Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name


class ReportPDF(FPDF):
    """A4 portrait, DejaVu fonts, the report's title in the header and 'page n of N' in the footer."""

    def __init__(self, title: str):
        super().__init__(orientation="P", unit="mm", format="A4")
        self.report_title = title
        for style, file in (("", "DejaVuSans.ttf"), ("B", "DejaVuSans-Bold.ttf"), ("I", "DejaVuSans-Oblique.ttf"),
                            ("BI", "DejaVuSans-BoldOblique.ttf")):
            self.add_font(FONT, style, str(dejavu(file)))
        self.add_font(MONO, "", str(dejavu("DejaVuSansMono.ttf")))
        self.set_margins(15, 15, 15)
        self.set_auto_page_break(True, margin=15)
        self.set_title(title)
        self.set_creator("python -m pipeline report (fpdf2)")

    def header(self):
        if self.page_no() > 1:
            self.set_font(FONT, "", 7)
            self.set_text_color(110)
            self.cell(0, 5, self.report_title, new_x="LMARGIN", new_y="NEXT", align="R")
            self.set_text_color(0)
            self.ln(2)

    def footer(self):
        self.set_y(-12)
        self.set_font(FONT, "", 8)
        self.set_text_color(110)
        self.cell(0, 6, f"page {self.page_no()} of {{nb}}", align="C")
        self.set_text_color(0)


def _escape(text: str) -> str:
    """Text with fpdf2's underline (--) and italics (__) markers escaped: the report's only inline markup is
    ``**bold**``, and flags (--set) or names (my__var) must print as written."""
    return text.replace("--", "\\--").replace("__", "\\__")


def _text(pdf: ReportPDF, text: str, size: float = BODY_PT, style: str = "") -> None:
    pdf.set_font(FONT, style, size)
    pdf.multi_cell(0, size * 0.5, _escape(text.replace("`", "")), markdown=True, align="L", new_x="LMARGIN",
                   new_y="NEXT")


def _heading(pdf: ReportPDF, block: Heading, keep: float = 0.0) -> None:
    """A bookmarked heading, moved to a new page unless it fits with `keep` mm of what follows it."""
    size = HEADING_PT.get(block.level, 11)
    if pdf.will_page_break(size * 3 + keep):
        pdf.add_page()
    pdf.ln(2 if block.level > 1 else 4)
    pdf.start_section(block.text, level=block.level, strict=False)
    _text(pdf, block.text, size, "B")
    pdf.ln(1)


def _keep(cell: str) -> str:
    """Join 'mean ± std' with no-break spaces so a cell never wraps inside it; drop Markdown code backticks."""
    return _escape(str(cell).replace(" ± ", "\u00a0±\u00a0").replace("`", ""))


PAD = 2.5  #: mm of cell padding and rule around a column's text
MIN_PPI = 150  #: a figure is printed at no fewer pixels per inch than this (legible on paper)
GUTTER = 5.0  #: mm between two figures set side by side
#: two figures share a row when each keeps at least this share of the width it would have alone: figures the page
#: height or their pixels already shrink (attention maps, curves), not a wide forest plot whose labels would shrink
PAIR_KEEPS = 0.65


def _widths(pdf: ReportPDF, block: TableBlock, size: float) -> tuple[list[float], list[float]]:
    pdf.set_font(FONT, "B", size)
    words, cells = [], []
    for j, head in enumerate(block.columns):
        texts = [_keep(head)] + [_keep(r[j]).replace("**", "") for r in block.rows if j < len(r)]
        words.append(max(pdf.get_string_width(w) for t in texts for w in t.split(" ")) + PAD)
        cells.append(min(max(pdf.get_string_width(t) for t in texts) + PAD, 70))
    return words, cells


def _layout(pdf: ReportPDF, block: TableBlock) -> tuple[float, list[float]]:
    """The largest font size (down to MIN_TABLE_PT) at which no word must break, and the column widths: each column
    starts at its longest word and shares the rest in proportion to how much wider its longest cell is."""
    size = TABLE_PT
    words, cells = _widths(pdf, block, size)
    while sum(words) > pdf.epw and size > MIN_TABLE_PT:
        size -= 0.5
        words, cells = _widths(pdf, block, size)
    if sum(words) > pdf.epw:  # even the smallest size cannot avoid breaking words: fit the page
        return size, [w * pdf.epw / sum(words) for w in words]
    if sum(cells) <= pdf.epw:  # everything fits on one line: widen a little, not to the full page
        scale = min(pdf.epw / sum(cells), 1.5)
        return size, [c * scale for c in cells]
    spare = max(0.0, pdf.epw - sum(words))
    extra = [c - w for w, c in zip(words, cells)]
    return size, [w + spare * e / (sum(extra) or 1) for w, e in zip(words, extra)]


def _table(pdf: ReportPDF, block: TableBlock) -> None:
    if pdf.will_page_break(25):
        pdf.add_page()
    _text(pdf, f"**{block.title}**", BODY_PT)
    size, widths = _layout(pdf, block)
    pdf.set_font(FONT, "", size)
    with pdf.table(col_widths=widths, width=min(sum(widths), pdf.epw), align="LEFT", markdown=True, text_align="LEFT",
                   line_height=size * 0.5, padding=0.8, headings_style=FontFace(emphasis="BOLD", fill_color=230),
                   first_row_as_headings=True, repeat_headings=1) as table:
        for row in [block.columns, *block.rows]:
            table.row([_keep(c) for c in row])
    if block.caption:
        pdf.ln(1)
        _text(pdf, block.caption, 7.5)
    pdf.ln(3)


def _figure_size(pdf: ReportPDF, block: FigureBlock, base: Path, width: float | None = None) -> tuple[float, float]:
    """(width, height) in mm: `width` (default the page width), or less so that two figures and captions fit on a
    page, never below MIN_PPI pixels per inch."""
    with Image.open(base / block.path) as im:
        aspect, pixels = im.height / im.width, im.width
    w = min(width or pdf.epw, pixels / MIN_PPI * 25.4)
    if w * aspect > pdf.eph * 0.38:
        w = pdf.eph * 0.38 / aspect
    return w, w * aspect


def _column(pdf: ReportPDF) -> float:
    return (pdf.epw - GUTTER) / 2


def _pairs(pdf: ReportPDF, left: Block, right: Block | None, base: Path) -> bool:
    """Whether two consecutive figures are set side by side (`PAIR_KEEPS`)."""
    figures = [b for b in (left, right) if isinstance(b, FigureBlock)]
    return len(figures) == 2 and all(
        _figure_size(pdf, f, base, _column(pdf))[0] >= PAIR_KEEPS * _figure_size(pdf, f, base)[0] for f in figures)


def _figure_row(pdf: ReportPDF, pair: tuple[FigureBlock, FigureBlock], base: Path) -> None:
    """Two figures side by side, each with its title above and its caption below, on one page."""
    col = _column(pdf)

    def height(text: str, size: float, style: str = "") -> float:
        pdf.set_font(FONT, style, size)
        return pdf.multi_cell(col, size * 0.5, _escape(text), markdown=True, dry_run=True, output="HEIGHT") \
            if text else 0.0

    sizes = [_figure_size(pdf, f, base, col) for f in pair]
    titles = max(height(f"**{f.title}**", BODY_PT) for f in pair)
    row = titles + max(h + height(f.caption, 7.5) for f, (_, h) in zip(pair, sizes))
    if pdf.will_page_break(row + 3):
        pdf.add_page()
    top = pdf.get_y()
    for k, (f, (w, h)) in enumerate(zip(pair, sizes)):
        x = pdf.l_margin + k * (col + GUTTER)
        pdf.set_xy(x, top)
        pdf.set_font(FONT, "", BODY_PT)
        pdf.multi_cell(col, BODY_PT * 0.5, _escape(f"**{f.title}**"), markdown=True, align="L")
        pdf.image(str(base / f.path), x=x + (col - w) / 2, y=top + titles, w=w, h=h)
        if f.caption:
            pdf.set_xy(x, top + titles + h)
            pdf.set_font(FONT, "", 7.5)
            pdf.multi_cell(col, 7.5 * 0.5, _escape(f.caption), markdown=True, align="L")
    pdf.set_xy(pdf.l_margin, top + row + 3)


def _figure(pdf: ReportPDF, block: FigureBlock, base: Path) -> None:
    w, h = _figure_size(pdf, block, base)
    pdf.set_font(FONT, "", 7.5)
    caption = pdf.multi_cell(0, 7.5 * 0.5, block.caption, dry_run=True, output="HEIGHT") if block.caption else 0
    if pdf.will_page_break(h + caption + 8):  # title, image and caption on one page
        pdf.add_page()
    _text(pdf, f"**{block.title}**", BODY_PT)
    pdf.image(str(base / block.path), x=pdf.l_margin + (pdf.epw - w) / 2, w=w, h=h)
    if block.caption:
        _text(pdf, block.caption, 7.5)
    pdf.ln(3)


def _code(pdf: ReportPDF, block: Code) -> None:
    pdf.set_font(MONO, "", 8)
    pdf.set_fill_color(244)
    pdf.multi_cell(0, 4.2, "\n".join(block.lines), fill=True, new_x="LMARGIN", new_y="NEXT", padding=1.5)
    pdf.ln(2)


def render_pdf(title: str, blocks: list[Block], base: Path, out: Path) -> None:
    """Write the blocks as a PDF at `out`; figure paths resolve against `base` (the report's folder)."""
    pdf = ReportPDF(title)
    pdf.add_page()
    pdf.start_section(title, level=0)
    _text(pdf, title, HEADING_PT[0], "B")
    pdf.ln(2)
    paired = False  # the block is the second figure of a row already set
    for block, after in zip(blocks, [*blocks[1:], None]):
        if paired:
            paired = False
            continue
        if isinstance(block, Heading):  # keep it with the figure or the start of the table below it
            keep = _figure_size(pdf, after, base)[1] + 10 if isinstance(after, FigureBlock) else 25
            _heading(pdf, block, keep)
        elif isinstance(block, Paragraph):
            _text(pdf, block.text)
            pdf.ln(1.5)
        elif isinstance(block, Bullets):
            for item in block.items:
                _text(pdf, f"•  {item}")
            pdf.ln(1.5)
        elif isinstance(block, TableBlock):
            _table(pdf, block)
        elif isinstance(block, FigureBlock) and _pairs(pdf, block, after, base):
            _figure_row(pdf, (block, after), base)
            paired = True
        elif isinstance(block, FigureBlock):
            _figure(pdf, block, base)
        elif isinstance(block, Code):
            _code(pdf, block)
    pdf.output(str(out))
