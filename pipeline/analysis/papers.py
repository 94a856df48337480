"""docs/papers.md's generated block: the project's own reference of the three papers, from paper/*.yaml and *.csv.

The papers and their official code, the claims the pipeline checks (paper/claims.yaml), every published number the
report compares against (paper/*.csv, unknown cells shown as n/p), and where each number comes from
(paper/sources.yaml). `python -m pipeline readme` writes it; nothing in it is typed by hand.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.analysis.document import Block, Bullets, Paragraph, TableBlock, block_markdown
from pipeline.analysis.fidelity import REPOS
from pipeline.schema import yaml_load

#: the CSVs of paper/, in reading order, with what they hold
NUMBERS = {"vit_top1": "ViT top-1 on small datasets ([NeurIPS] Table 1, its summary's deltas, [SIA], a course"
                       " reproduction)",
           "imagenet": "ImageNet-1K ([NeurIPS] Table 2 / App. F, [SIA], DeiT reference points)",
           "convergence": "Training accuracy at epochs 10 / 50 / 100 ([NeurIPS] camera-ready Table 7)",
           "convmixer_vs_vit": "ViT against an equal-size ConvMixer on CIFAR-10 ([NeurIPS] rebuttal, [SIA])",
           "filter_study": "ConvMixer with learned or frozen filters ([CI] Fig. 4, [SIA])",
           "gaussian": "Frozen Gaussian filters, σ × heads ([CI] Table 6)",
           "ci_alpha": "M′_I attention over α ([CI] Tables 3-8)",
           "ci_table2": "Model III: Q/K trained or frozen, with or without value ([CI] Tables 1-2)",
           "references": "Reference points not from the papers (Fashion-MNIST benchmark CNNs, Weight Selection)"}
#: columns every CSV shares; the others are the cell's keys
COMMON = ("table", "source", "version", "status", "profile", "metric", "value", "note")
CODE = {"code-2505": "NeurIPS", "code-2404": "SIA", "code-2401": "CI"}


def _arxiv(text: str) -> str:
    """'2505.19985 (v1 ...)' -> a link to the abstract page, keeping the rest of the text."""
    number = text.split()[0].split("v")[0]
    return f"[arXiv {number}](https://arxiv.org/abs/{number}){text[len(text.split()[0]):]}"


def paper_rows(sources: dict) -> list[list[str]]:
    code = {paper: f"{tag} ([github.com/{REPOS[tag]}](https://github.com/{REPOS[tag]}))"
            for tag, paper in CODE.items()}
    out = []
    for key, p in sources.get("papers", {}).items():
        where = _arxiv(str(p["arxiv"])) if p.get("arxiv") else ""
        out.append([f"[{key}]", p.get("title", ""), p.get("authors", ""),
                    "; ".join(x for x in (str(p.get("venue", "")), where) if x), code.get(key, "none")])
    return out


def number_rows(frame: pd.DataFrame) -> list[list[str]]:
    keys = [c for c in frame.columns if c not in COMMON]
    rows = []
    for _, r in frame.iterrows():
        cell = ", ".join(f"{k} {r[k]}" for k in keys if pd.notna(r[k]) and str(r[k]) != "")
        value = "n/p" if pd.isna(r["value"]) else f"{r['value']:g}"
        rows.append([str(r["table"]), cell, str(r["metric"]), value, str(r["status"]), str(r["source"])])
    return rows


def papers_blocks(paper_dir: str | Path) -> list[Block]:
    paper_dir = Path(paper_dir)
    sources = yaml_load((paper_dir / "sources.yaml").read_text())
    claims = yaml_load((paper_dir / "claims.yaml").read_text())
    blocks: list[Block] = [
        TableBlock("The papers and their official code", ["Tag", "Title", "Authors", "Where", "Official code"],
                   paper_rows(sources), "The tags are how the report, the docs and the code name the papers;"
                   " code-2505, code-2404 and code-2401 are the official repositories by the arXiv number of their"
                   " paper. [MIM] is the mimetic baseline, not a reproduction target."),
        TableBlock("The claims the pipeline checks (paper/claims.yaml)", ["#", "Claim", "Published evidence", "Source"],
                   [[c["id"], " ".join(c["claim"].split()), " ".join(c["published"].split()),
                     " ".join(c["source"].split())] for c in claims], "Each claim's test (its comparisons, margins and"
                   " planned seeds) is in paper/plan.yaml; the report judges every claim on the run it describes."),
        Paragraph("**Published numbers** (top-1 accuracy in %, exactly as published). Status: published = the"
                  " papers' text or tables, or numbers the authors gave in the OpenReview rebuttal; secondary ="
                  " quoted by a secondary source; derived = arithmetic on quoted numbers; reference = not from the"
                  " papers; n/p = not published in a reachable source, never filled in by guessing. The source tags"
                  " are explained after the tables."),
    ]
    for name, what in NUMBERS.items():
        path = paper_dir / f"{name}.csv"
        if path.is_file():
            blocks.append(TableBlock(f"{what} (paper/{name}.csv)", ["Table", "Cell", "Metric", "Value", "Status",
                                                                    "Source"], number_rows(pd.read_csv(path)), ""))
    blocks.append(Bullets([f"`{tag}`: {' '.join(str(s['what']).split())}" + (f" ([{s['paper']}])" if s.get("paper")
                                                                             else "")
                           for tag, s in sources.get("sources", {}).items()]))
    return blocks


def papers_markdown(paper_dir: str | Path) -> str:
    return "\n\n".join(map(block_markdown, papers_blocks(paper_dir))) + "\n"
