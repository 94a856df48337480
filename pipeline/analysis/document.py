"""The report as a list of blocks, rendered twice (Markdown here, PDF in `pdf`), so report.md and report.pdf say the
same thing. Inline markup is ``**bold**`` only, which both renderers read; commands go into `Code` blocks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Heading:
    text: str
    level: int = 1  #: 1 = section, 2 = subsection (the title is level 0)


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class TableBlock:
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class FigureBlock:
    path: str  #: relative to the report's folder (Markdown link); the PDF resolves it against that folder
    title: str
    caption: str = ""


@dataclass
class Code:
    lines: list[str] = field(default_factory=list)


Block = Heading | Paragraph | Bullets | TableBlock | FigureBlock | Code


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_markdown(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(map(_cell, columns)) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(map(_cell, r)) + " |" for r in rows])


def block_markdown(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * (block.level + 1) + " " + block.text
    if isinstance(block, Paragraph):
        return block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, TableBlock):
        parts = [f"**{block.title}**", table_markdown(block.columns, block.rows)]
        return "\n\n".join(parts + ([block.caption] if block.caption else []))
    if isinstance(block, FigureBlock):
        caption = f"\n\n{block.caption}" if block.caption else ""
        return f"**{block.title}**\n\n![{block.title}]({block.path}){caption}"
    if isinstance(block, Code):
        return "```bash\n" + "\n".join(block.lines) + "\n```"
    raise TypeError(f"not a report block: {block!r}")


def to_markdown(title: str, blocks: list[Block]) -> str:
    return "\n\n".join([f"# {title}", *map(block_markdown, blocks)]) + "\n"
