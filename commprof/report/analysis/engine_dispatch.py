"""Which all-reduce path each serving engine takes for each op of the plan on this box, today (the engine's
defaults) and with the answer's switches: one table per engine version (commprof.report.analysis.engine_sglang,
engine_vllm), each rule citing the released file and function it is read from. Pure, except `installed_engines`,
which reads package metadata.

An engine version without a table is said so, with the nearest table named as not verified, never used silently.
"""

from __future__ import annotations

from commprof.errors import UsageError
from commprof.report.analysis.engine_facts import Box, EngineTable, LibraryFacts, Op, Rule, Switches, version_numbers
from commprof.report.analysis.engine_flashinfer import FLASHINFER_0_7_4
from commprof.report.analysis.engine_sglang import SGLANG_0_5_23
from commprof.report.analysis.engine_sglang_fusion import sglang_fusion_fails
from commprof.report.analysis.engine_switch_rules import with_switch_rules
from commprof.report.analysis.engine_vllm import VLLM_0_33, VLLM_0_34
from commprof.versions import installed_version

__all__ = ["Box", "Op", "Rule", "TABLES", "dispatch", "engine_paths", "parse_engine", "sglang_fusion_fails"]

CAPS = ("_MAX_NUMEL", "_MAX_SIZE", "_MAX_BYTES")  # size caps: they bound what a switch takes, moving nothing alone
TABLES: dict[tuple[str, str], EngineTable] = {(t.package, t.version): t for t in (SGLANG_0_5_23, VLLM_0_33, VLLM_0_34)}
LIBRARIES: dict[tuple[str, str], LibraryFacts] = {(f.package, f.version): f for f in (FLASHINFER_0_7_4,)}
DEFAULT_ENGINES = ("sglang==0.5.23", "vllm==0.33")
ENGINE_PACKAGES = ("sglang", "vllm")


def known_versions() -> dict[str, tuple[str, ...]]:
    """Per package, the versions commprof has verified facts for (engines' dispatch tables, FlashInfer's facts)."""
    known: dict[str, tuple[str, ...]] = {}
    for package, version in (*TABLES, *LIBRARIES):
        known[package] = (*known.get(package, ()), version)
    return known


def parse_engine(text: str) -> tuple[str, str]:
    """ "sglang==0.5.23" -> ("sglang", "0.5.23"); vLLM's patch releases share a table ("0.33.1" -> "0.33")."""
    name, sep, version = text.strip().partition("==")
    name = name.strip().lower()
    if not sep or name not in ENGINE_PACKAGES or not version.strip():
        raise UsageError(f"--engine {text!r}: give sglang==VERSION or vllm==VERSION (e.g. sglang==0.5.23)")
    version = version.strip()
    if name == "vllm":
        version = ".".join(version.split(".")[:2])
    return name, version


def nearest_table(name: str, version: str) -> EngineTable | None:
    """The table of `name` closest to `version` (ties: the older), for saying which one was not verified."""
    tables = [t for (package, _), t in TABLES.items() if package == name]
    if not tables:
        return None
    wanted = version_numbers(version)
    width = max(len(wanted), *(len(version_numbers(t.version)) for t in tables))

    def distance(t: EngineTable) -> tuple:
        a, b = (wanted + (0,) * width)[:width], (version_numbers(t.version) + (0,) * width)[:width]
        return tuple(abs(x - y) for x, y in zip(a, b)), b

    return min(tables, key=distance)


def installed_engines() -> tuple[str, ...]:
    """The engines installed here, as --engine takes them ("vllm==0.34.0"), from package metadata; () : none."""
    found = []
    for package in ENGINE_PACKAGES:
        version = installed_version(package)
        if version:
            found.append(f"{package}=={version}")
    return tuple(found)


def recorded_engines(versions: dict) -> tuple[str, ...]:
    """The engines a run's meta.json `versions` names (recorded where it ran), as --engine takes them."""
    return tuple(f"{p}=={versions[p]}" for p in ENGINE_PACKAGES if isinstance(versions.get(p), str) and versions[p])


def engines_for(given: tuple[str, ...], versions: dict) -> tuple[tuple[str, ...], str]:
    """The engines whose dispatch the report reproduces, and where that choice comes from: --engine; else the
    engines installed where the run ran (its meta.json); else those installed here; else commprof's defaults."""
    if given:
        return given, "given with --engine"
    if recorded := recorded_engines(versions):
        return recorded, "installed where the run ran (meta.json versions)"
    if here := installed_engines():
        return here, "installed here (package metadata)"
    return DEFAULT_ENGINES, "commprof's default tables: no engine installed where the run ran or here"


def library_note(package: str, version: str | None) -> str:
    """Whether commprof's facts about a library (FlashInfer) were verified for this installed version."""
    if not version:
        return f"{package}: not installed"
    known = [v for (p, v) in LIBRARIES if p == package]
    if version in known:
        return f"{package} {version}: facts verified on its wheel"
    nearest = min(
        known,
        key=lambda v: tuple(abs(a - b) for a, b in zip(version_numbers(v), version_numbers(version))),
        default=None,
    )
    near = f"; the nearest, {nearest}, is not verified for it" if nearest else ""
    return f"{package} {version}: no facts verified for this version{near}"


def dispatch(table: EngineTable, box: Box, op: Op, switches: Switches) -> tuple[Rule, list[str]]:
    """The rule that takes `op` with `switches` set over the engine's defaults, and why each rule before it did
    not."""
    seen = table.effective(switches, box)
    passed = []
    rules = with_switch_rules(table)
    for rule in rules:
        why = rule.check(box, op, seen)
        if why is None:
            return rule, passed
        passed.append(f"{rule.path}: {why}")
    return rules[-1], passed


def _paths(table: EngineTable, box: Box, ops: list[Op], switches: Switches) -> list[str]:
    return [dispatch(table, box, op, switches)[0].path for op in ops]


def _unknown(text: str, name: str, version: str) -> dict:
    near = nearest_table(name, version)
    known = ", ".join(f"{n}=={v}" for n, v in TABLES)
    nearest = (
        f"; the nearest, {near.package}=={near.version}, is not verified for {version} and is not used" if near else ""
    )
    return {
        "engine": text,
        "table": None,
        "why": f"no dispatch table for {text} (known: {known}){nearest}: not guessed",
    }


def engine_paths(
    engines: tuple[str, ...], box: Box, ops: list[Op], answer: dict[str, dict[str, str]], chosen: str = ""
) -> list[dict]:
    """Per engine asked for: each op group's path today (the engine's defaults) and with the answer's switches
    (`answer`: engine name -> the variables the decision names for it), each rule with its source; a version
    without a table says so. `chosen`: where the engine versions come from (engines_for)."""
    out = []
    for text in engines:
        name, version = parse_engine(text)
        table = TABLES.get((name, version))
        if table is None:
            out.append(_unknown(text, name, version) | {"chosen": chosen})
            continue
        switches = answer.get(table.engine, {})
        rows = []
        for op in ops:
            today, _ = dispatch(table, box, op, {})
            with_answer, skipped = dispatch(table, box, op, switches)
            rows.append(
                {
                    "group": op.group,
                    "tokens": op.tokens,
                    "bytes": op.nbytes,
                    "today": today.path,
                    "today_source": today.source,
                    "with_answer": with_answer.path,
                    "with_answer_source": with_answer.source,
                    "skipped": skipped,
                }
            )
        inert = [
            f"{variable}={value}: moves no op of this plan on this box"
            for variable, value in switches.items()
            if not variable.endswith(CAPS)
            and _paths(table, box, ops, switches)
            == _paths(table, box, ops, {k: v for k, v in switches.items() if k != variable})
        ]
        failing = [f"{f.setting}: {why} ({f.cite})" for f in table.flags if (why := f.fails(box)) is not None]
        out.append(
            {
                "engine": f"{table.engine} {table.version}",
                "version": f"{text}: the {table.package} {table.version} table, checked on the {table.wheel} wheel",
                "chosen": chosen,
                "table": str(table.dispatch),
                "rows": rows,
                "inert": inert,
                "fails_here": failing,
                "engine_sets": engine_sets(table, box),
            }
        )
    return out


def engine_sets(table: EngineTable, box: Box) -> list[str]:
    """What the engine sets by itself on this box and launch, with its rule: one line each (today's paths follow
    them)."""
    return [
        (f"{default.switch}={derived.value}: " if derived.value is not None else f"{default.switch} left unset: ")
        + f"{derived.why} ({default.rule or default.cite})"
        for default, derived in table.derived({}, box)
    ]


def fusion_flag_fails(engine: str, sm: float | None, version: str | None = None) -> str | None:
    """Why an engine's fused all-reduce + RMSNorm flag cannot act on these GPUs (None: it can, or unknown), from
    the newest table of that engine (or `version`'s)."""
    tables = [t for t in TABLES.values() if t.engine == engine and (version is None or t.version == version)]
    if not tables:
        return None
    table = max(tables, key=lambda t: version_numbers(t.version))
    box = Box(sm, 2, False, False)
    return next(
        (f"{table.engine} {table.version}: {why} ({f.cite})" for f in table.flags if (why := f.fails(box)) is not None),
        None,
    )


def paths_basis(box: Box, backend: str, simulated: str | None = None) -> str:
    """Where the engine section's paths come from: the engine's released dispatch read against the box's SM, TP and
    P2P, never a measurement of the engine; on another backend (gloo), that the run measured it and not NCCL;
    `simulated`: the evidence label of a simulation."""
    sm = f"SM {box.sm:g}" if box.sm is not None else "SM unknown"
    links = "NVLink" if box.nvlink else "P2P" if box.p2p else "no P2P"
    multicast = {True: ", multicast", False: ", no multicast", None: ", multicast unknown"}[box.multicast]
    read = f"the engine's own dispatch rules with its defaults, read for TP {box.tp}, {sm}, {links}{multicast}"
    if backend != "nccl":
        return (
            f"This run measured {backend} on CPU ranks: NCCL never ran here, and no engine did. The paths are what "
            f"the engine would do on your GPU box ({read}); measure with a sweep on that box to time them."
        )
    if simulated:
        return f"Predicted, not measured: {read} of the simulated box ({simulated})."
    return f"From {read} of this box; the times elsewhere are commprof's replay, not the engine's."
