"""The claim check: every output of a report read as a user reads it (all text of the page, every table included,
the terminal, summary.json, every exported file), each verdict extracted with its figure and its error, and set
against the Decision in summary.json. `problems(report, terminal)` lists what breaks one answer:

- a verdict that is not the one rule's on the figure and error shown beside it;
- a verdict statement that no claim of summary.json makes (a figure, error or verdict of its own: a number shown
  that is not summary.json's, or a subject given two verdicts);
- a verdict word said outside a claim (a view or file judging on its own);
- a line that names a subject (a verify T, a band, a run's T in the comparison) with another claim than the
  Decision's for it;
- a break-even that is not the statistic the chart draws; a headline over 25 words, or one that keeps the baseline
  where the verify steps run something faster beyond error; a simulation that exports a live line or says "faster"
  in its headline; a calibration applied to some points only, or not applied without the first screen saying so; a
  withdrawn run with a claim still beyond error; a derived figure whose verdict is not its source's;
- a measured run with an interleaved confirmation that exports a point it did not confirm, takes a route or
  finds a fused kind faster on anything but its measurement beside its reference, holds a measured claim not to
  its noise floor, or shows a floor or confirmation sentence the page and recommend.env do not;
- an observation's explanations shown with other words than summary.json's, or a verdict in words that is not the
  one its `explains` says;
- a calibrated simulation whose ops outside the calibrated sizes its expected error does not cover or name;
- a plain all-reduce band routed to (or compared with) a point that is not a plain all-reduce implementation (a fused
  kind's own all-reduce), an engine setting for an implementation no band is routed to, or a view that says what ran
  or what is routed otherwise than the routes and tables: the verify card's "faster still", (b)'s "no other
  implementation ran", routing.txt's and the terminal's band lines, engine_flags.txt's sections;
- a heading (h1-h4, a big line) over 25 words; a "not comparable" banner that does not name the field that differs
  with two different values;
- a comparison row that is not its run's own answer: a measured run's answer at each T, a simulated run's
  measurement plan candidate by candidate, labelled a proposal, never an answer applied.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

from commprof.evidence import rule
from commprof.records.files import RESULTS_FILE
from commprof.report.decision.observation import EXPLANATIONS_SHOWN

# A claim as every output writes it (decision/formatting.claim_words).
STATEMENT = re.compile(
    r"(\d+(?:\.\d+)?) % (less|more) \((?:±(\d+(?:\.\d+)?) %|(error unknown))\): (beyond error|inside error|not judged)"
)
# Verdict words no output may say except as a claim's (rule texts aside, which say what the words mean).
FREE_VERDICTS = re.compile(
    r"beyond error|inside error|beyond model error|within model error|beyond noise|within noise|"
    r"beyond the evidence|not told apart from|\bno: within\b",
    re.I,
)
FILES = ("recommend.env", "nccl_tuner.conf", "engine_flags.txt", "routing.txt", "confirm.toml")
MAX_HEADLINE_WORDS = 25


def page_text(page: str) -> str:
    """The page's visible text, tables included, one space between cells."""
    page = re.sub(r"(?s)<(svg|style|script)\b.*?</\1>", " ", page)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def outputs(report: Path, terminal: str, summary: dict) -> dict[str, str]:
    """Every output of a report as text, by name."""
    texts = {"index.html": page_text((report / "index.html").read_text()), "terminal": terminal}
    for run in summary["runs"]:
        folder = report if run["folder"] == "." else report / run["folder"]
        for name in FILES:
            if (folder / name).is_file():
                texts[f"{run['folder']}/{name}"] = (folder / name).read_text()
    return texts


def problems(report: Path, terminal: str = "") -> list[str]:
    """Everything in the report's outputs that breaks one answer (empty: none)."""
    summary = json.loads((report / "summary.json").read_text())
    found = []
    claims = [c for run in summary["runs"] for c in run["claims"]]
    found += _claims_follow_the_rule(summary)
    texts = outputs(report, terminal, summary)
    allowed = _rule_texts(summary)
    for name, text in texts.items():
        found += _statements(name, text, claims)
        found += _free_verdicts(name, text, allowed)
    page = (report / "index.html").read_text()
    pages = _run_pages(summary, texts["index.html"])
    for run in summary["runs"]:
        found += _routes_ran(run, texts, pages.get(run["run"]["run_id"], ""))
        found += _subjects(run, texts)
        found += _run_facts(report, run, texts)
        found += _confirmation(run, texts)
        found += _explanations(run, texts)
        found += _calibrated_range(report, run)
    found += _numbers_shown(summary, texts)
    found += _comparison(summary, page)
    found += _headings(page)
    found += _incomparable(summary, texts["index.html"])
    return found


def _claims_follow_the_rule(summary: dict) -> list[str]:
    """Each claim's verdict is the rule's on its own figure and error; a derived one carries its source's."""
    out = []
    for run in summary["runs"]:
        by_id = {c["id"]: c for c in run["claims"]}
        for c in run["claims"]:
            if rule(c["gain_pct"], c["error_pct"]) != c["verdict"]:
                out.append(
                    f"summary.json: claim {c['id']!r}: {c['verdict']} is not the rule's on {c['gain_pct']} ± {c['error_pct']}"
                )
            source = by_id.get(c["derived_from"]) if c["derived_from"] else None
            if c["derived_from"] and (source is None or source["verdict"] != c["verdict"]):
                out.append(
                    f"summary.json: claim {c['id']!r} derives from {c['derived_from']!r} but says {c['verdict']}"
                )
            if run["unconfirmed"] and run["run"]["simulated"] and c["verdict"] == "beyond error":
                out.append(f"summary.json: claim {c['id']!r} stays beyond error though the observation withdrew it")
    return out


def _statements(name: str, text: str, claims: list[dict]) -> list[str]:
    """Every claim statement shown: the rule's verdict on its own figure, and a claim of summary.json."""
    out = []
    for gain, way, error, unknown, verdict in STATEMENT.findall(text):
        figure = float(gain) * (1 if way == "less" else -1)
        err = None if unknown else float(error)
        close = err is not None and abs(abs(figure) - err) < 0.11  # rounded on both sides: either verdict
        if not close and rule(figure, err) != verdict:
            out.append(f"{name}: {gain} % {way} ({error or unknown}): {verdict} is not the rule's verdict")
        if not any(_says(c, figure, err, verdict) for c in claims):
            out.append(f"{name}: {gain} % {way} ({error or unknown}): {verdict}: no claim of summary.json says it")
    return out


def _says(claim: dict, figure: float, error: float | None, verdict: str) -> bool:
    if claim["verdict"] != verdict or abs(round(claim["gain_pct"], 1) - figure) > 0.051:
        return False
    if error is None:
        return claim["error_pct"] is None
    return claim["error_pct"] is not None and abs(round(claim["error_pct"], 1) - error) <= 0.051


def _leaves(value) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _numbers_shown(summary: dict, texts: dict[str, str]) -> list[str]:
    """Every time the terminal and the page's first screen show (ms), and every percent of a headline, is one of
    summary.json's numbers as shown (µs or ms, to the digits shown)."""
    numbers = _leaves(summary)
    shown_ms = {f"{v * scale:.{d}f}" for v in numbers for scale in (1.0, 1e-3) for d in (1, 2, 3)}
    pct = {f"{abs(v):.{d}f}" for v in numbers for d in (0, 1)}
    first = texts["index.html"].split("What do I set?", 1)[0]
    out = []
    for name, text in (("terminal", texts["terminal"]), ("index.html", first)):
        for figure in re.findall(r"(\d+\.\d+) ms\b", text):
            if figure not in shown_ms:
                out.append(f"{name}: {figure} ms is no number of summary.json")
    for run in summary["runs"]:
        for figure in re.findall(
            r"(\d+(?:\.\d+)?)(?=(?:–\d+(?:\.\d+)?)? %)|–(\d+(?:\.\d+)?) %", run["headline"]["text"]
        ):
            for each in figure:
                if each and each not in pct:
                    out.append(f"headline: {each} % is no number of summary.json: {run['headline']['text']}")
    return out


def _rule_texts(summary: dict) -> list[str]:
    """The texts a report quotes as they are: the rule that says what the verdict words mean, and what each
    crossover search found (the search's own finding, from its records)."""
    texts = []
    for run in summary["runs"]:
        evidence = run["environment"]["evidence"]
        texts += [evidence["rule"], f"Rule: {evidence['rule']}"]
        texts += [n for n in run["nccl"]["notes"] if n.startswith("Evidence:")]
        texts += [found["verdict"] for found in (run["routing"] or {}).get("crossovers", [])]
    return sorted(set(texts), key=len, reverse=True)


def _free_verdicts(name: str, text: str, allowed: list[str]) -> list[str]:
    for said in allowed:
        text = text.replace(said, " ")
    text = STATEMENT.sub(" ", text)
    return [f"{name}: says {m.group(0)!r} outside a claim: ...{text[max(0, m.start() - 80) : m.end() + 40]}..."
            for m in FREE_VERDICTS.finditer(text)]  # fmt: skip


def _words(claim: dict | None, nothing: str) -> str:
    """decision/formatting.claim_words, for the test's own reading."""
    if claim is None:
        return nothing
    way = "less" if claim["gain_pct"] >= 0 else "more"
    error = f"±{claim['error_pct']:.1f} %" if claim["error_pct"] is not None else "error unknown"
    return f"{abs(claim['gain_pct']):.1f} % {way} ({error}): {claim['verdict']}"


def _subjects(run: dict, texts: dict[str, str]) -> list[str]:
    """Each line that names a subject says that subject's claim: the terminal's verify steps and bands, routing.txt's
    bands."""
    out = []
    by_id = {c["id"]: c for c in run["claims"]}
    terminal = _terminal_of(run, texts["terminal"])
    for step in run["steps"]:
        line = re.search(rf"verify step T = {step['tokens']}: [\d.]+ -> [\d.]+ ms: ([^\n]*)", terminal)
        claim = by_id.get(step["claim"])
        if line and claim is not None and not line.group(1).startswith(_words(claim, "")):
            out.append(
                f"terminal: verify step T = {step['tokens']} says {line.group(1)!r}, its claim {_words(claim, '')!r}"
            )
        if line and claim is None and STATEMENT.search(line.group(1)):
            out.append(f"terminal: verify step T = {step['tokens']} has a verdict but nothing was compared")
    routing = texts.get(f"{run['folder']}/routing.txt", "")
    for route in run["routes"]:
        band = f"  {route['collective']} {route['mode']} {route['min_bytes']}-{route['max_bytes']} B"
        line = next((x for x in routing.splitlines() if x.startswith("#" + band)), None)
        said = _words(by_id.get(route["claim"]), "no verdict")
        if line is not None and said not in line:
            out.append(f"routing.txt: {band.strip()} does not say its claim {said!r}: {line}")
    return out


def _terminal_of(run: dict, terminal: str) -> str:
    """The run's own lines of the terminal: after its name where several runs were reported, up to the next."""
    lines = terminal.splitlines()
    name = run["run"]["name"]
    if name not in lines:
        return terminal
    start = lines.index(name) + 1
    end = next(
        (k for k in range(start, len(lines)) if not lines[k].startswith(" ") and lines[k] != lines[start]), len(lines)
    )
    return "\n".join(lines[start - 1 : end])


def _run_facts(report: Path, run: dict, texts: dict[str, str]) -> list[str]:
    out = []
    facts, folder = run["run"], run["folder"]
    headline = run["headline"]["text"]
    if len(headline.split()) > MAX_HEADLINE_WORDS:
        out.append(f"headline over {MAX_HEADLINE_WORDS} words: {headline}")
    if headline not in texts["index.html"]:
        out.append(f"index.html does not lead with the headline: {headline}")
    if facts["simulated"]:
        if re.search(r"\d+(?:–\d+)? % faster", headline):
            out.append(f"a simulation's headline says faster: {headline}")
        for name in ("recommend.env", "routing.txt", "engine_flags.txt", "nccl_tuner.conf"):
            live = [x for x in texts.get(f"{folder}/{name}", "").splitlines() if x.startswith(("export ", "source "))]
            if live:
                out.append(f"{name}: a simulation exports a live line: {live[0]}")
    out += _calibration(report, run, texts["index.html"])
    by_id = {c["id"]: c for c in run["claims"]}
    faster = [s["point_id"] for s in run["steps"] if s["applied"] and (by_id.get(s["claim"]) or {}).get("gain_pct", 0) > 0
              and by_id[s["claim"]]["verdict"] == "beyond error"]  # fmt: skip
    if faster and headline.startswith(("Keep ", "Nothing ")):
        out.append(f"the headline keeps the baseline, but the verify steps run {sorted(set(faster))} faster beyond "
                   f"error: {headline}")  # fmt: skip
    for row in run["tables"]["projection"]:
        chart = (row["draft_ms"] + row["verify_ms"]) / row["decode_ms"]
        if row["break_even"] is not None and not math.isclose(row["break_even"], chart, rel_tol=1e-9):
            out.append(f"break-even {row['break_even']} at T = {row['tokens']} is not the chart's {chart}")
        for cell in row["cells"]:
            claim = by_id.get(cell["claim"])
            pays = claim is not None and claim["verdict"] == "beyond error" and claim["gain_pct"] > 0
            if cell["tokens_per_s"] is not None and (cell["verdict"] == "pays") != pays:
                out.append(
                    f"tokens/s cell T = {row['tokens']} accept {cell['accept']}: {cell['verdict']} not its claim's"
                )
    return out


def _calibration(report: Path, run: dict, page: str) -> list[str]:
    """A calibration is applied to every point or to none, and where to none the first screen says so."""
    use = run["environment"]["calibration"]
    if use is None:
        return []
    records = _records(report, run)
    used = {r.get("point_id") for r in records if r.get("kind") == "step" and str(r.get("calibration")) == use["file"]}
    steps = {r.get("point_id") for r in records if r.get("kind") == "step"}
    out = []
    if used and used != steps:
        out.append(f"calibration {use['file']} prices {len(used)} of {len(steps)} points: applied in part")
    if (bool(used) != use["applied"]) and steps:
        out.append(f"calibration {use['file']}: summary.json says applied={use['applied']}, the records say otherwise")
    first = page.split(run["run"]["name"] + " " + run["environment"]["evidence"]["label"], 1)[0]
    if not use["applied"] and "NOT APPLIED" not in first:
        out.append(f"calibration {use['file']} is applied to no point, and the first screen does not say so")
    return out


RUN_DIRS: dict[str, Path] = {}  # run id -> its folder, where the caller knows it (the records a report came from)


def _records(report: Path, run: dict) -> list[dict]:
    folder = RUN_DIRS.get(run["run"]["run_id"])
    if folder is None or not (folder / RESULTS_FILE).is_file():
        return []
    return [json.loads(line) for line in (folder / RESULTS_FILE).read_text().splitlines() if line]


COMPARE_ROW = re.compile(
    r'<tr><td>([^<]*)</td><td class="num">([^<]*)</td><td class="num">[^<]*</td><td class="num">([^<]*)</td>'
    r"<td>([^<]*)</td><td><code>([^<]*)</code></td>"
)
PROPOSED = "proposed, not measured: predicted"  # how a simulated run's row labels its plan's candidate


def _comparison(summary: dict, page: str) -> list[str]:
    """Runs side by side: each row is its run's own answer: a measured run's at each T (the Decision's point and
    its claim), a simulated run's measurement plan, candidate by candidate, a proposal to measure (no time applied)."""
    if '<section id="compare">' not in page:
        return []
    section = page.split('<section id="compare">', 1)[1].split("</section>", 1)[0]
    out = []
    rows = [[html.unescape(cell) for cell in row] for row in COMPARE_ROW.findall(section)]
    expected = [(run, row) for run in summary["runs"] if run["nccl"]["per_t"] for row in _compared_rows(run)]
    if len(rows) != len(expected):
        out.append(f"the comparison has {len(rows)} rows for the runs' {len(expected)} answers (per T, or candidates)")
    for (name, tokens, answer, verdict, settings), (run, (t, said, point)) in zip(rows, expected):
        if not name.startswith(run["run"]["name"] + " (") or tokens != t or verdict != said:
            out.append(
                f"comparison: {name} T = {tokens}: {verdict!r}, its Decision: {run['run']['name']} T = {t}: {said!r}"
            )
        if not settings.startswith(point):
            out.append(f"comparison: {name} T = {tokens}: settings {settings!r}, its Decision's {point!r}")
        if run["plan"] is not None and (re.search(r"\d ms$", answer) or "measure" not in settings):
            out.append(f"comparison: {name} T = {tokens}: a simulated run's row shows {answer!r} / {settings!r} as an "
                       "answer applied, not its plan's proposal to measure")  # fmt: skip
    return out


def _compared_rows(run: dict) -> list[tuple[str, str, str]]:
    """(T, claim words, settings' start) of each row a run has side by side: its Decision's answer."""
    by_id = {c["id"]: c for c in run["claims"]}
    plan = run["plan"]
    if plan is None:
        return [
            (str(at["tokens"]), _words(by_id.get(at["claim"]), "keeps the baseline: nothing compared"), at["settings"])
            for at in run["nccl"]["per_t"]
        ]
    if not plan["candidates"]:
        return [("", "no setting is predicted faster than the baseline", "")]
    return [
        (str(c["tokens"]), f"{PROPOSED} {_words(by_id.get(c['claim']), '')}", f"{c['point_id']}: ")
        for c in plan["candidates"]
    ]


def _run_pages(summary: dict, page: str) -> dict[str, str]:
    """Each run's own part of the page's text (from its heading to the next run's), by run id."""
    marks = []
    for run in summary["runs"]:
        mark = f"{run['run']['name']} {run['environment']['evidence']['label']} 1 Headline"
        marks.append((page.find(mark), run["run"]["run_id"]))
    marks.sort()
    return {
        run_id: page[start : marks[k + 1][0] if k + 1 < len(marks) else len(page)]
        for k, (start, run_id) in enumerate(marks)
        if start >= 0
    }


NOTHING_RAN = "No other all-reduce implementation ran in this sweep"
FASTER_STILL = re.compile(r"Another implementation \(b\) is faster still: (.*?); it needs the engine")
ROUTED_BAND = re.compile(r"(\S+) (?:beats|is predicted to beat) .*? at T = ([\d, ]+) \(")
ENGINE_SECTION = re.compile(r"^# (SGLang|vLLM): (\S+) -- written", re.M)


def _routes_ran(run: dict, texts: dict[str, str], page: str) -> list[str]:
    """What ran and what is routed, as every output states it, is the Decision's: a plain all-reduce band goes to
    (or is compared with) a plain all-reduce implementation that ran, never a fused kind's own all-reduce; an engine
    setting is for a routed implementation; the verify card, (b), routing.txt, the terminal and engine_flags.txt
    name the routed implementations and no other, and (b) says nothing else ran only where nothing did."""
    out = []
    points = run["tables"]["points"] or {"point_id": [], "impl": [], "fused": []}
    fused_points = {p for p, f in zip(points["point_id"], points["fused"]) if f}
    plain = {_impl(i) for i, f in zip(points["impl"], points["fused"]) if not f}
    fused_only = {_impl(i) for i, f in zip(points["impl"], points["fused"]) if f} - plain
    mode = run["run"]["mode"]
    routed = [r for r in run["routes"] if r["collective"] == "all_reduce" and not r["kept"]]
    for r in [r for r in run["routes"] if r["collective"] == "all_reduce"]:
        band = f"all_reduce {r['mode']} {r['min_bytes']}-{r['max_bytes']} B"
        if not r["kept"] and r["point_id"] in fused_points:
            out.append(
                f"summary.json: {band} is routed to {r['point_id']} ({r['impl']}), a fused kind's own all-reduce"
            )
        if r["compared"] and _impl(r["compared"]) in fused_only:
            out.append(f"summary.json: {band} is compared with {r['compared']}, a fused kind's own all-reduce")
    taken = {_impl(r["impl"]) for r in routed}
    for s in run["engines"]["settings"]:
        if _impl(s["impl"]) not in taken:
            out.append(f"summary.json: {s['engine']} is told to run {s['impl']}, which no all-reduce band is routed to")
    shown = {_impl(r["impl"]): r for r in routed if r["mode"] == mode and r["tokens"]}
    card = FASTER_STILL.search(page)
    for said in re.findall(r"(?:^|, )(\S+) at T = ", card.group(1)) if card else []:
        if _impl(said) not in shown:
            out.append(f"index.html: the verify card says {said} is faster still, but no {mode} band is routed to it")
    nothing = NOTHING_RAN in page
    if nothing and (shown or run["tables"]["alternatives"]):
        out.append(f"index.html: (b) says {NOTHING_RAN.lower()}, but the Decision routes or compares "
                   f"{sorted(shown) or sorted({a['impl'] for a in run['tables']['alternatives']})}")  # fmt: skip
    card_b = page.split("(b) Another all-reduce implementation", 1)[-1].split("(c) Fused all-reduce", 1)[0]
    said_b = {_impl(name) for name, _ in ROUTED_BAND.findall(card_b)} if page else set(shown)
    if said_b != set(shown):
        out.append(f"index.html: (b) names {sorted(said_b)} as taking sizes, the Decision routes {sorted(shown)}")
    flags = texts.get(f"{run['folder']}/engine_flags.txt", "")
    for engine, impl in ENGINE_SECTION.findall(flags):
        if _impl(impl) in plain | fused_only and _impl(impl) not in taken:
            out.append(f"engine_flags.txt: {engine} is told to run {impl}, which no all-reduce band is routed to")
    routing = texts.get(f"{run['folder']}/routing.txt", "")
    terminal = _terminal_of(run, texts["terminal"])
    backend = run["run"]["backend"]
    for r in run["routes"]:
        keeper = ("NCCL" if backend == "nccl" else backend) if r["impl"] in ("nccl", backend) else r["impl"]
        what = r["impl"] if not r["kept"] else keeper
        band = f"  {r['collective']} {r['mode']} {r['min_bytes']}-{r['max_bytes']} B"
        line = next((x for x in routing.splitlines() if x.startswith("#" + band)), None)
        if line is not None and not re.search(rf"\): {re.escape(what)}\b", line):
            out.append(f"routing.txt: {band.strip()} does not name what runs it ({what}): {line}")
        if r["collective"] == "all_reduce" and r["tokens"]:
            head = f"  {r['mode']} all-reduce, T = {', '.join(map(str, r['tokens']))} ({r['min_bytes']}-{r['max_bytes']} B): "
            line = next((x for x in terminal.splitlines() if x.startswith(head)), None)
            if line is not None and not line[len(head) :].startswith(what):
                out.append(f"terminal: {head.strip()} does not name what runs it ({what}): {line}")
    return out


def _impl(name: str) -> str:
    """An implementation's name as the records, the routes and the files write it (dashes or underscores)."""
    return str(name).replace("_", "-")


MAX_HEADING_WORDS = MAX_HEADLINE_WORDS
HEADING = re.compile(r'(?s)<h([1-4])\b[^>]*>(.*?)</h\1>|<p class="big[^"]*">(.*?)</p>')


def _headings(page: str) -> list[str]:
    """Every heading of the page (h1-h4, a card's big line) is at most 25 words, like the headline."""
    out = []
    for match in HEADING.finditer(re.sub(r"(?s)<(svg|style|script)\b.*?</\1>", " ", page)):
        text = page_text(match.group(2) or match.group(3) or "")
        if len(text.split()) > MAX_HEADING_WORDS:
            out.append(f"index.html: a heading of {len(text.split())} words (at most {MAX_HEADING_WORDS}): {text}")
    return out


def _incomparable(summary: dict, page: str) -> list[str]:
    """A "not comparable" banner names each field that differs with every run's value, and they differ."""
    said = summary.get("incomparable")
    if not said:
        return (
            ["index.html: a 'Not comparable' banner that summary.json does not hold"]
            if "Not comparable:" in page
            else []
        )
    out = [] if f"Not comparable: {said}" in page else [f"index.html: the banner is not summary.json's: {said}"]
    found = re.match(r"these runs replay different steps \((.*)\): ", said)
    names = [run["run"]["name"] for run in summary["runs"]]
    for field in found.group(1).split("; ") if found else [said]:
        items = field.split(", ")
        named = len(items) == len(names) and all(x.endswith(f" in {n}") for x, n in zip(items, names))
        if not named or len({x.removesuffix(f" in {n}").casefold() for x, n in zip(items, names)}) < 2:
            out.append(f"not comparable: {field!r} does not name a field whose values differ between the runs")
    return out


MARGIN_TERMS = ("drift", "noise floor")


def _confirmation(run: dict, texts: dict[str, str]) -> list[str]:
    """A measured run that confirmed beside the baseline (interleaved.jsonl): a live line only for a point confirmed
    there, its claim on the confirmation's figures; every measured claim held to the noise floor (one of its error
    terms); the floor in the rule the page and recommend.env quote; the confirmation's sentence on both."""
    found = run["environment"]["interleaved"]
    if found is None:
        return []
    out = []
    nccl, floor = run["nccl"], run["environment"]["evidence"]["noise_floor_pct"]
    said = nccl["confirmation"] or ""
    env = texts.get(f"{run['folder']}/recommend.env", "")
    confirmed = {c["point_id"]: c for c in found["confirmations"] if c["baseline_us"] is not None}
    live = [x for x in env.splitlines() if x.startswith("export ")]
    if live and not said.startswith("confirmed"):
        out.append(f"recommend.env: {live[0]!r} is live, but the confirmation says {said!r}")
    claim = next((c for c in run["claims"] if c["id"] == nccl["claim"]), None)
    if said.startswith("confirmed") and (nccl["point"] is None or nccl["point"]["point_id"] not in confirmed):
        out.append(f"the answer {nccl['point']} is not a point the confirmation measured beside the baseline")
    if (
        said.startswith("confirmed")
        and claim
        and not any(math.isclose(claim["before"], c["baseline_us"]) for c in confirmed.values())
    ):
        out.append(f"claim {claim['id']!r} is not made on the confirmation's figures (before {claim['before']})")
    if said.startswith("not confirmed") and claim and claim["verdict"] == "beyond error" and claim["gain_pct"] > 0:
        out.append(f"claim {claim['id']!r} is faster beyond error, but the confirmation did not confirm it")
    if floor is not None:
        for c in run["claims"]:
            margin = [t["pct"] for t in c["error"] or () if t["name"] in MARGIN_TERMS]
            scale = 1.0 if c["gain_pct"] >= 0 else c["after"] / c["before"]
            if c["derived_from"] is None and c["error"] and (not margin or max(margin) < floor * scale - 1e-6):
                out.append(f"claim {c['id']!r} is not held to the noise floor (±{floor} %): {c['error']}")
        rule_text = run["environment"]["evidence"]["rule"]
        if f"noise floor of the baseline measured again beside the answer (±{floor:.1f} %" not in rule_text:
            out.append(f"the rule does not state the noise floor ±{floor:.1f} %: {rule_text}")
        for name, text in (("index.html", texts["index.html"]), ("recommend.env", env)):
            if f"Rule: {rule_text}" not in text:
                out.append(f"{name}: the rule with the noise floor is not shown beside the verdicts")
    out += _answers_confirmed(run, found)
    if said:
        shown = said[:1].upper() + said[1:]
        for name, text in (("index.html", texts["index.html"]), ("recommend.env", env)):
            if shown not in text:
                out.append(f"{name}: the confirmation's sentence is not shown: {shown[:80]}...")
    return out


def _answers_confirmed(run: dict, found: dict) -> list[str]:
    """In a run that confirmed, a route another implementation takes and a fused kind faster beyond error stand on
    their measurement beside their reference (a claim on the confirmation's figures), never on the first pass."""
    out = []
    by_id = {c["id"]: c for c in run["claims"]}
    again = {c["point_id"] for c in found["confirmations"] if c["baseline_us"] is not None}

    def confirmed(claim: dict | None, point_id: str) -> bool:
        return claim is not None and "interleaved confirmation" in claim["subject"] and point_id in again

    for route in run["routes"]:
        if not route["kept"] and not confirmed(by_id.get(route["claim"]), route["point_id"]):
            band = f"{route['collective']} {route['mode']} {route['min_bytes']}-{route['max_bytes']} B"
            out.append(f"route {band}: {route['impl']} takes it, but not on its measurement beside its reference")
    for row in run["fused"]:
        claim = by_id.get(row["claim"])
        faster = claim is not None and claim["verdict"] == "beyond error" and claim["gain_pct"] > 0
        if faster and not confirmed(claim, row["point_id"]):
            out.append(f"fused kind {row['point_id']} at T = {row['tokens']}: faster beyond error, but not confirmed")
    return out


def _explanations(run: dict, texts: dict[str, str]) -> list[str]:
    """The ranked explanations of an observation the model does not explain: the page and the terminal list the
    first ones in summary.json's words, each verdict in words the one its `explains` says."""
    observed = run["environment"]["observed"]
    found = observed["explanations"] if observed else None
    if found is None:
        return []
    out = []
    terminal = _terminal_of(run, texts["terminal"])
    for name, text in (("index.html", texts["index.html"]), ("terminal", terminal)):
        if found["verdict"] not in text:
            out.append(f"{name}: the explanations' verdict is not summary.json's: {found['verdict'][:80]}")
        for e in found["explanations"][:EXPLANATIONS_SHOWN]:
            if f"{e['condition']}" not in text or e["state"] not in text:
                out.append(f"{name}: explanation {e['condition']} is not shown as summary.json says: {e['state']}")
    for e in found["explanations"]:
        expected = {True: "explains:", False: "does not explain it"}.get(e["explains"], "not judged")
        if expected not in e["state"]:
            out.append(f"explanation {e['condition']}: {e['state']!r} is not what explains={e['explains']} says")
    return out


def _calibrated_range(report: Path, run: dict) -> list[str]:
    """A calibrated simulation with ops outside the sizes its calibration was judged on: the run's expected error
    (every claim's model term) covers its steps' and says so."""
    steps = [
        r["nccl"]
        for r in _records(report, run)
        if r.get("kind") == "step" and isinstance((r.get("nccl") or {}).get("outside_calibration"), dict)
    ]
    if not steps:
        return []
    evidence, out = run["environment"]["evidence"], []
    if "outside the calibrated sizes" not in (evidence["expected_error_basis"] or ""):
        out.append(f"the run's expected error does not name its ops outside the calibrated sizes: {evidence}")
    worst = max((n["expected_error_pct"] for n in steps if n.get("expected_error_pct") is not None), default=None)
    pct = evidence["expected_error_pct"]
    if pct is not None and worst is not None and pct < worst - 1e-9:
        out.append(f"the run's expected error ±{pct} % is below a step's with ops outside the calibration (±{worst} %)")
    for c in run["claims"]:
        terms = [t for t in c["error"] or () if t["name"] == "model"]
        if pct is not None and c["gain_pct"] >= 0 and terms and not math.isclose(terms[0]["pct"], pct):
            out.append(f"claim {c['id']!r}: its model error ±{terms[0]['pct']} % is not the run's ±{pct} %")
    return out
