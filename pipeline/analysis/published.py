"""The papers' published numbers (paper/*.csv) and claims (paper/claims.yaml) as data: one CSV per table, values in
percent as published, each row with its source and status (paper/sources.yaml). A value no source gives has
status ``n/p`` and loads as NaN, never filled in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pipeline.errors import PipelineError

#: columns every paper/*.csv has
REQUIRED = ("table", "source", "version", "status", "metric", "value")
#: what a row's number is (see paper/sources.yaml)
STATUSES = ("published", "secondary", "derived", "n/p", "reference")
#: key columns some files have, parsed as numbers
NUMERIC_KEYS = ("sigma", "heads", "epoch", "alpha", "data_fraction")


def _read_csv(path: Path) -> pd.DataFrame:
    """One paper/ CSV, checked: required columns, known statuses, a value exactly where the status says so."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise PipelineError(f"{path}: missing column(s) {', '.join(missing)}; every paper/ CSV needs"
                            f" {', '.join(REQUIRED)}")
    bad = sorted(set(df["status"]) - set(STATUSES))
    if bad:
        raise PipelineError(f"{path}: unknown status {bad[0]!r}; use one of {', '.join(STATUSES)}")
    empty = df["value"].str.strip() == ""
    wrong = df[empty != (df["status"] == "n/p")]
    if len(wrong):
        raise PipelineError(f"{path}, row {wrong.index[0] + 2}: status {wrong['status'].iloc[0]!r} with value"
                            f" {wrong['value'].iloc[0]!r}; an n/p cell has an empty value, every other row a number")
    try:
        df["value"] = pd.to_numeric(df["value"].replace("", np.nan))
        for key in NUMERIC_KEYS:
            if key in df.columns:
                df[key] = pd.to_numeric(df[key].replace("", np.nan))
    except ValueError as exc:
        raise PipelineError(f"{path}: a value or key is not a number ({exc})") from None
    return df.assign(file=path.stem)


def load_published(paper_dir: str | Path) -> pd.DataFrame:
    paths = sorted(Path(paper_dir).glob("*.csv"))
    if not paths:
        raise PipelineError(f"{paper_dir}: no published-number CSVs found; the aggregate stage reads paper/*.csv"
                            " (run it from the repository root)")
    frame = pd.concat([_read_csv(p) for p in paths], ignore_index=True)
    text = [c for c in frame.columns if c not in ("value", *NUMERIC_KEYS)]
    frame[text] = frame[text].fillna("")
    return frame


def load_claims(paper_dir: str | Path) -> list[dict]:
    """paper/claims.yaml: the claims the pipeline checks, each {id, short, claim, source, published}."""
    path = Path(paper_dir) / "claims.yaml"
    if not path.is_file():
        raise PipelineError(f"{path}: not found; it lists the papers' claims the aggregate checks")
    claims = yaml.safe_load(path.read_text()) or []
    for c in claims:
        if not {"id", "short", "claim", "source", "published"} <= set(c):
            raise PipelineError(f"{path}: claim {c.get('id', c)!r} needs the keys id, short, claim, source,"
                                " published")
    return [{k: str(v).strip() for k, v in c.items()} for c in claims]


def select(published: pd.DataFrame, file: str, **keys) -> pd.DataFrame:
    rows = published[published["file"] == file]
    for key, value in keys.items():
        if key not in rows.columns:
            return rows.iloc[0:0]
        col = rows[key]
        rows = rows[np.isclose(col.astype(float), float(value))] if key in NUMERIC_KEYS else rows[col == value]
    return rows
