"""The laptop set's one table from its two runs (`pipeline.analysis.laptop_set`): each claim's row from the profile
whose design asks it, the other run's verdict named where it reaches the claim too, the count of verdicts over the
rows shown, and a run not yet made said so."""

from __future__ import annotations

from pipeline.analysis.claims_report import ASKS, LAPTOP_SET, SET_RUN
from pipeline.analysis.laptop_set import set_markdown, set_table


def run(verdicts: dict[str, str], seeds: int, rev: str) -> tuple[dict, dict]:
    """(claims.json, what_was_run.json) of a run with these verdicts, one comparison per tested claim."""
    claims = [{"id": cid, "short": f"claim {cid}", "claim": f"claim {cid}", "verdict": v, "summary": "no runs",
               "comparisons": [] if v == "not tested" else [
                   {"label": f"cell {cid}", "a": "impulse", "b": "default", "mean": 1.0, "low": 0.5, "high": 1.5,
                    "needs": "> 0", "verdict": v, "regime": "2,000 images", "arm_means": [80.0, 79.0]}]}
              for cid, v in verdicts.items()]
    return {"claims": claims, "plan": {}}, {"seeds": list(range(seeds)), "git_rev": [rev]}


ALL = [c for ids in ASKS.values() for c in ids] + ["2"]


def test_each_claim_comes_from_the_run_that_asks_it():
    laptop = run({c: "supported" if c in ASKS["laptop"] or c == "7" else "not tested" for c in ALL}, 5, "aaaaaaa1")
    rest = run({c: "inconclusive" if c in ASKS["laptop-rest"] or c == "7" else "not tested" for c in ALL}, 3,
               "bbbbbbb2")
    table, shown = set_table({"laptop": laptop, "laptop-rest": rest})
    rows = {r[0]: r for r in table.rows}
    assert tuple(ASKS) == LAPTOP_SET and len(rows) == len(ALL)
    assert rows["1"][2] == "**supported**" and rows["1"][4].startswith("`laptop` (5 seeds): ")
    assert rows["3"][2] == "**inconclusive**" and rows["3"][4].startswith("`laptop-rest` (3 seeds): ")
    assert rows["2"][2] == "**not tested**"  # ImageNet's: neither run asks it
    # claim 7 is laptop's; laptop-rest reaches it too, and says so rather than vanishing
    assert rows["7"][2] == "**supported**" and "`laptop-rest` (3 seeds) reaches it too: inconclusive" in rows["7"][6]
    assert "reaches it too" not in rows["1"][6]
    assert rows["1"][5] == "cell 1: impulse 80.00, default 79.00"
    text = set_markdown({"laptop": laptop, "laptop-rest": rest})
    assert text.startswith(SET_RUN + "s `laptop` and `laptop-rest`, the laptop set, one run each.**")
    assert "revision(s) aaaaaaa, bbbbbbb;" in text
    assert f"{len(ASKS['laptop'])} supported, {len(ASKS['laptop-rest'])} inconclusive, 1 not tested." in text


def test_one_run_of_the_set_says_the_other_has_not_run():
    laptop = run({c: "supported" if c in ASKS["laptop"] else "not tested" for c in ALL}, 5, "aaaaaaa1")
    text = set_markdown({"laptop": laptop})
    assert text.startswith(SET_RUN + " `laptop` of the laptop set, one run.** Its cells")
    assert "Profile `laptop-rest` has not run" in text
    rows = [line for line in text.splitlines() if line.startswith("| 3 |")]
    assert "**not tested**" in rows[0] and "`laptop` (5 seeds)" in rows[0]
