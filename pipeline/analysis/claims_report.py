"""The report's statistics beside the verdicts: the assumptions, each comparison's per-seed differences, each
claim's plan (post-hoc changes, confirmatory or not), the plan's history from git (in the report its summary, in
reports/appendix.md every change), and the claims table the README carries (reports/claims.md).

Everything here renders `results/tables/claims.json` (the aggregate's `claims`, `plan.history`) and
what_was_run.json; nothing is computed that the aggregate did not write.
"""

from __future__ import annotations

from pipeline.analysis.document import Block, Bullets, Heading, Paragraph, TableBlock, block_markdown
from pipeline.analysis.numbers import NA, num

#: where the report's auditor's material goes (`report.build_appendix`), beside report.md
APPENDIX = "reports/appendix.md"
#: how reports/claims.md of a run of the laptop set begins (the README's claims block is taken only from one)
SET_RUN = "**Every claim in one table: profile"
#: the profiles whose runs fill the README's one claims table: the laptop set (paper/plan.yaml's confirmatory entries
#: `laptop` and `laptop-rest`; `cpu-all` and `cpu-rest` were its earlier design), each with the claims its design asks
#: (docs/profiles.md; claim 2, ImageNet's, is in neither): `pipeline.analysis.laptop_set` merges their tables
ASKS = {"laptop": ("1", "4", "5a", "6", "7", "10", "13", "14"),
        "laptop-rest": ("3", "5b", "8", "9", "11", "12", "15")}
#: the set's profiles; the first is named when none ran
LAPTOP_SET = tuple(ASKS)


def table_profile(run_profile: str | None) -> str:
    """The laptop-set profile whose table reports/claims.md holds: the run's own where it is one, else the first."""
    return run_profile if run_profile in LAPTOP_SET else LAPTOP_SET[0]
#: the caption the claims table carries wherever it is printed
CLAIMS_CAPTION = ("Verdicts by paper/plan.yaml from one run of the profile named (the revision its runs record):"
                  " supported = every comparison passes its one-sided test at 2.5 % (its 95 % interval on the claimed"
                  " side of 0 or of the margin); contradicted = one is reversed after Holm's correction over the"
                  " claim's family; inconclusive = neither; not tested = the run lacks what the claim is about."
                  " Plan: confirmatory = the plan's confirmatory seeds, never run before the plan named them, and no"
                  " change a verdict depends on since the run's revision; post hoc = a change a verdict depends on"
                  f" was made after a result of the claim was recorded (listed in {APPENDIX}, 'The plan's"
                  " history'). Comparisons: a − b in points with its 95 % interval.")


def assumption_text() -> str:
    """What the intervals and tests assume, and where they can fail."""
    return ("**Assumptions.** Each comparison's per-seed differences ('The claims in detail') are independent draws"
            " from a normal distribution: the t interval and test are exact under it and approximate otherwise (at"
            " 3 to 5 seeds one seed far from the others moves both; `python bench/bench_verdicts.py --skew` measures"
            " the error rates when one seed in five loses several points). The test images are a sample of the data"
            " distribution, their term treated as known. A seed pairs the arms it trains (the same training subset,"
            " data order and augmentation draws), and nothing else: seeds are exchangeable. Claim 12's teachers are"
            " fixed: one pretraining run per teacher, so its intervals sample the fine-tuning seeds and the test"
            " images, not pretraining (a second pair of teachers could differ by more than the interval says)."
            " Claim 6's arms share only a seed number (Welch, unpaired). Each claim's Holm family is its plan's;"
            " comparisons outside it (secondary analyses, arms beyond the paper, sensitivity lines) are shown,"
            " labelled, and never decide it.")


def _differences(c: dict) -> str:
    """'seed 10: +1.23, seed 11: -0.40' (paired) or 'a: 71.2, 70.9; b: 69.0, 68.8' (Welch)."""
    if c.get("per_seed"):
        return ", ".join(f"{s}: {num(v, True)}" for s, v in zip(c["seeds"], c["per_seed"]))
    if c.get("runs"):
        return "; ".join(f"{name}: {', '.join(num(v) for v in values)}" for name, values in zip((c["a"], c["b"]),
                                                                                               c["runs"]))
    return NA


def _interval(c: dict) -> str:
    return NA if c.get("low") is None else f"[{num(c['low'], True)}, {num(c['high'], True)}]"


def per_seed_table(claim: dict) -> TableBlock | None:
    """Each comparison of a claim with its per-seed differences, interval and verdict."""
    rows = [[c["label"], f"{c['a']} − {c['b']}", c["needs"], _differences(c), num(c["mean"], True), _interval(c),
             c["verdict"]] for c in claim.get("comparisons", [])]
    if not rows:
        return None
    return TableBlock(f"Claim {claim['id']}: each comparison seed by seed",
                      ["Cell", "a − b", "Needs", "Per seed (points; Welch: each arm's runs, %)", "Mean", "95% CI",
                       "Verdict"], rows, "Per seed: the seed's difference over the whole test split (paired arms).")


def plan_line(claim: dict, history: dict) -> str:
    """The claim's plan in one line: confirmatory, or its post-hoc changes."""
    plan = claim.get("plan")
    if not history.get("available") or plan is None:
        return "plan history not available (no git history where the aggregate ran)"
    parts = []
    if plan["confirmatory"]:
        parts.append("confirmatory: the plan's confirmatory seeds, and no change a verdict depends on since this"
                     " run's revision")
    for h in plan["post_hoc"]:
        parts.append(f"post hoc: {h['date'][:10]} {h['commit'][:7]} ({h['file']}: {h['what']}; after"
                     f" {h['read_before']})")
    for h in plan["after_run"]:
        parts.append(f"changed after this run's revision: {h['date'][:10]} {h['commit'][:7]} ({h['what']})")
    return "; ".join(parts) or "no post-hoc change; not the confirmatory run"


def plan_word(claim: dict, history: dict) -> str:
    """The plan column of the claims tables: confirmatory / post hoc (k) / exploratory."""
    plan = claim.get("plan")
    if not history.get("available") or plan is None:
        return NA
    after = " (changed since this run)" if plan["after_run"] else ""
    if plan["confirmatory"]:
        k = len(plan["post_hoc"])
        return "confirmatory" + (f" ({k} post-hoc revision{'s' if k > 1 else ''}, all before this run)" if k else "")
    return (f"post hoc ({len(plan['post_hoc'])})" if plan["post_hoc"] else "exploratory") + after


def history_blocks(claims: dict) -> list[Block]:
    """The plan's history from git (reports/appendix.md): every change of paper/plan.yaml and of a seed list, dated,
    with the first recorded result before it, post-hoc changes labelled; then each claim's plan line."""
    history = (claims.get("plan") or {}).get("history") or {}
    blocks: list[Block] = [Heading("The plan's history")]
    if not history.get("available"):
        return blocks + [Paragraph(history.get("note", "Not recorded: the aggregate ran without a repository."))]
    run = history.get("run") or {}
    conf = history.get("confirmatory")
    text = ("Generated from the repository's git history (`pipeline.analysis.plan_history`): every change to"
            " paper/plan.yaml and to a seed list of params.yaml or a profile, with the claims it touches and the first"
            " result of those claims a reader could have seen before it (the first README.md showing it). A change a"
            " verdict depends on, made after such a result, is **post hoc**; planning assumptions, notes, secondary"
            " analyses and comments do not change a verdict and are listed as such; setting a seed list where there"
            " was none designs a new run.")
    if run:
        text += (f" This run's runs record revision {run['revision'][:7]} ({run['date'][:10]}): a change after it"
                 " may have seen this run's results.")
    if conf:
        text += _confirmatory(conf)
    rows = [[h["date"][:10], h["commit"][:7], h["file"], ", ".join(h["claims"]) or "–", h["what"], h["kind"],
             ("**post hoc**: after " + h["read_before"]) if h["post_hoc"] else (
                 f"after {h['read_before']}" if h["read_before"] else "before any result"),
             "yes" if h.get("after_run") else ""] for h in history.get("changes", [])]
    plans = [f"Claim {c['id']}: {plan_line(c, history)}" for c in claims.get("claims", [])]
    return blocks + [Paragraph(text), TableBlock(
        "Changes of the plan and of the seed lists", ["Date", "Commit", "File", "Claims", "Change", "Kind",
                                                      "First result before it", "After this run"], rows,
        "Kind: verdict = a verdict may depend on it; power or notes only; comments only; design = a seed list set"
        " where there was none. First result: the first README.md that shows a result of a touched claim."),
        Paragraph("**Each claim's plan**: confirmatory, or each post-hoc change it depends on."), Bullets(plans)]


#: the kinds of change `plan_history` records, as the summary counts them
KINDS = {"verdict": "a verdict may depend on", "power or notes only": "power or notes only",
         "comments only": "comments only", "design": "designs of a new run"}


def in_detail(claim: dict) -> bool:
    """Whether the report gives the claim a section: it has a verdict, or comparisons to show seed by seed."""
    return claim["verdict"] != "not tested" or bool(claim.get("comparisons"))


def history_summary(claims: dict) -> list[Block]:
    """The plan's history in the report: the changes counted by kind, and the post-hoc ones behind the claims this
    run tests; every change is in reports/appendix.md (`history_blocks`), too long for the reader's report."""
    history = (claims.get("plan") or {}).get("history") or {}
    blocks: list[Block] = [Heading("The plan's history")]
    if not history.get("available"):
        return blocks + [Paragraph(history.get("note", "Not recorded: the aggregate ran without a repository."))]
    changes, run, conf = history.get("changes", []), history.get("run") or {}, history.get("confirmatory")
    kinds = {k: sum(h["kind"] == k for h in changes) for k in dict.fromkeys([*KINDS, *(h["kind"] for h in changes)])}
    dates = sorted(h["date"][:10] for h in changes)
    text = (f"{len(changes)} change{'' if len(changes) == 1 else 's'} of paper/plan.yaml and of the seed lists"
            + (f" from {dates[0]} to {dates[-1]}" if dates else "") + " ("
            + ", ".join(f"{n} {KINDS.get(k, k)}" for k, n in kinds.items() if n)
            + f"), {sum(h['post_hoc'] for h in changes)} of them post hoc for a claim they touch")
    if run:
        text += (f"; {sum(bool(h.get('after_run')) for h in changes)} made after this run's revision"
                 f" {run['revision'][:7]} ({run['date'][:10]})")
    text += "."
    if conf:
        text += _confirmatory(conf)
    behind: dict[tuple[str, str, str], dict] = {}
    for c in filter(in_detail, claims.get("claims", [])):
        for h in (c.get("plan") or {}).get("post_hoc", []):
            row = behind.setdefault((h["commit"], h["file"], h["what"]), {"change": h, "claims": [], "before": []})
            row["claims"].append(c["id"])
            row["before"].append(h["read_before"])
    text += (" Every change, with what it is and the first result before it, and each claim's plan:"
             f" {APPENDIX}, 'The plan's history'.")
    if not behind:
        return blocks + [Paragraph(text + " No change is post hoc for a claim this run tests.")]
    rows = [[r["change"]["date"][:10], r["change"]["commit"][:7], r["change"]["file"], r["change"]["what"],
             ", ".join(r["claims"]), "; ".join(dict.fromkeys(r["before"])),
             "yes" if r["change"].get("after_run") else ""]
            for r in sorted(behind.values(), key=lambda r: r["change"]["date"])]
    return blocks + [Paragraph(text), TableBlock(
        "The post-hoc changes behind this run's verdicts", ["Date", "Commit", "File", "Change", "Claims",
                                                            "First result before it", "After this run"], rows,
        "A change a verdict depends on, made after a result of the claim was recorded (the first README.md that"
        " shows it), for each claim this run gives a section in 'The claims in detail'.")]


def _confirmatory(conf: dict) -> str:
    """' Confirmatory seeds: [50, 51, 52] for profile cpu, named 2026-12-01; this run is that run.'"""
    return (f" Confirmatory seeds: {conf['seeds']} for profile {conf['profile']}, named {(conf['named'] or '?')[:10]}; "
            + ("this run is that run." if conf["holds"] else "this run is not (" + _why_not(conf) + ")."))


def _why_not(conf: dict) -> str:
    if conf.get("used_before"):
        return f"seeds {conf['used_before']} were in a seed list before the plan named them"
    return "its profile or seed lists are not the confirmatory ones"


#: how each comparison's own outcome is marked in the claims table
MARKS = {"supported": "passes", "contradicted": "reversed", "inconclusive": "open", "not tested": "not tested"}


def deciding(claim: dict, limit: int = 6) -> str:
    """Every comparison of the claim with its interval and outcome, the ones that decide the verdict first (the
    reversed ones of a contradicted claim, the open ones of an inconclusive one), at most `limit`."""
    comps = claim.get("comparisons", [])
    if not comps:
        return claim.get("summary", "")
    verdict = claim["verdict"]
    first = [c for c in comps if c["verdict"] == verdict] if verdict in ("contradicted", "inconclusive") else []
    chosen = first + [c for c in comps if c not in first]
    text = "; ".join(f"{c['label']}: {c['a']} − {c['b']} {num(c['mean'], True)} {_interval(c)} (needs {c['needs']}:"
                     f" {MARKS.get(c['verdict'], c['verdict'])}{edge_mark(c)})" for c in chosen[:limit])
    more = len(chosen) - limit
    return text + (f"; {more} more in the report" if more > 0 else "")


def verdict_cell(claim: dict) -> str:
    """'**inconclusive**', with 'at the edge: another CPU, supported' when a comparison's cross-CPU shift could turn
    it (`claims.claim_edge_verdict`)."""
    alt = claim.get("edge_verdict")
    return f"**{claim['verdict']}**" + (f" (at the edge: on another CPU, {alt})" if alt else "")


def edge_mark(c: dict) -> str:
    """A comparison's ', at the edge (another CPU: supported)' when its cross-CPU shift could turn its verdict."""
    alt = c.get("edge_verdict")
    return f", at the edge (another CPU: {alt})" if alt else ""


def claim_regime(claim: dict) -> str:
    """The regime of a claim's comparisons (images, steps, tokens, parameters), each distinct one once."""
    parts = [p for c in claim.get("comparisons", []) for p in (c.get("regime") or "").split("; ") if p]
    return "; ".join(dict.fromkeys(parts)) or NA


def verdict_counts(claims: list[dict]) -> str:
    """'3 supported, 1 contradicted, 4 inconclusive, 8 not tested' (in that order; absent verdicts left out)."""
    order = ("supported", "contradicted", "inconclusive", "not tested")
    counts = {v: sum(c["verdict"] == v for c in claims) for v in order}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def arm_accuracies(claim: dict) -> str:
    """'fashion_mnist, vit3: impulse 78.43, mimetic 74.67, default 72.77': each arm's mean over the runs its
    comparisons use (`stats.Estimate.arm_means`) on the images they score, grouped by the comparisons' cell, each arm
    once; a comparison of more than two arms (a difference of gains) adds none."""
    cells: dict[str, dict[str, float]] = {}
    for c in claim.get("comparisons", []):
        means = c.get("arm_means") or []
        if len(means) == 2 and None not in means:
            arms = cells.setdefault(c["label"] + (" (test + held-out pool)" if c.get("pool") else ""), {})
            for arm, mean in zip((c["a"], c["b"]), means):
                arms.setdefault(arm, mean)
    return "; ".join(f"{label}: " + ", ".join(f"{arm} {num(m)}" for arm, m in arms.items())
                     for label, arms in cells.items()) or NA


def claims_table(claims: dict, ran: dict) -> TableBlock:
    """Every claim: verdict, the regime it was reached in, its plan, its arms' accuracies, its comparisons with
    intervals."""
    history = (claims.get("plan") or {}).get("history") or {}
    rows = [[c["id"], c.get("short") or c["claim"], verdict_cell(c), claim_regime(c), plan_word(c, history),
             arm_accuracies(c), deciding(c)] for c in claims.get("claims", [])]
    return TableBlock("Every claim, its verdict and the comparisons that decide it",
                      ["#", "Claim", "Verdict", "Regime", "Plan", "Arms (mean top-1, %)", "Comparisons (95% CI, pts)"],
                      rows, CLAIMS_CAPTION + " Regime: training images per seed, optimizer steps, token grid and"
                      " parameters of the cells compared. Arms: each arm's mean over the seeds its comparisons use, in"
                      " the metric the comparison names (else top-1 on the test split, and the held-out pool where"
                      " marked). Each comparison says"
                      " whether it passes its test; the ones that decide the verdict come first.")


def claims_markdown(claims: dict | None, ran: dict | None, profile: str) -> str:
    """reports/claims.md: the claims table of `profile`'s run, for the README; 'not run yet' without one."""
    if claims is None or ran is None or ran.get("profile") != profile:
        return (f"**Every claim in one table: not run yet.** Profile `{profile}` (the laptop set) has not been run"
                " here; `make repro PROFILE=" + profile + " && .venv/bin/python -m pipeline readme`"
                " fills this block from its run.\n")
    revs = ", ".join(r[:7] for r in ran.get("git_rev", [])) or "unknown"
    lines = [f"{SET_RUN} `{profile}`, one run.** Its cells record revision(s) {revs};"
             f" {verdict_counts(claims.get('claims', []))}.",
             block_markdown(claims_table(claims, ran)),
             "Generated by `python -m pipeline report` from results/tables/claims.json; `python -m pipeline readme`"
             " copies it here. Per-seed differences and power: `reports/report.pdf`; the plan's history:"
             f" `{APPENDIX}`."]
    return "\n\n".join(lines) + "\n"


def claim_detail(claim: dict, history: dict) -> list[Block]:
    """A claim's plan in a word and its per-seed table (beside its evidence in the report); its plan line, which
    names every post-hoc change, is in reports/appendix.md."""
    word = plan_word(claim, history)
    blocks: list[Block] = [Bullets([f"Plan: {word}; its changes: 'The plan's history'" if word != NA else
                                    f"Plan: {plan_line(claim, history)}"])]
    table = per_seed_table(claim)
    return blocks + ([table] if table else [])
