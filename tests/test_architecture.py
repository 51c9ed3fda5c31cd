"""The package's shape stays as README's "How it is built" says: data flows one way, no import circles, small files.

Imports are read from the source (every `import` and `from ... import`, including those inside functions and
`if TYPE_CHECKING:`), so a circle hidden behind a lazy or type-only import counts too.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "commprof"
MAX_LINES = 450

# The stages in data-flow order: a unit imports only units of earlier tiers (and itself). A unit is a top-level
# module or package of commprof; each stage's command (`<stage>/command.py`, or `<stage>/<name>_command.py` for a
# stage with several) and the other entry points may import anything.
TIERS = (
    # printing what users give, without trusting it (errors print through it); which package versions are installed
    {"terminal", "versions"},
    {"errors", "stats", "units", "nccl_vocab"},  # nccl_vocab: NCCL's names, spellings and grammar
    {"nccl_tuning"},  # the NCCL variables commprof sweeps and models, and their values' checkers
    # the variables commprof may set (NCCL's from nccl_vocab); reading what users give, without trusting it; the
    # files commprof ships
    {"env_names", "textfiles", "shipped_files"},
    {
        "records",
        "torch_env",
    },  # the records' vocabularies and the one adapter of msgspec's refusals; what libtorch reads once
    {
        "evidence",  # what each record source is worth as evidence: reads the records' vocabulary
        "problems",  # how user files report problems: their typed fields, read through records' adapter
        "planner",
        "nccl_log",
        "floor",
    },  # config.json -> step plan; NCCL's log -> facts and findings; the box's floor; what a crossover is
    {"impls", "doctor"},  # the implementations; the box checks
    {"replay", "nccl_graph"},  # the replay engine (its layers: REPLAY_PARTS); NCCL graph files for the box
    {"sweep"},
    {"costmodel", "trace"},  # what reads records (or traces) afterwards
    {"explain"},  # which box condition explains what the box measured: the cost model's and the doctor's reading
    {"report"},  # the one answer of a run, and its page and files
)
# Known and being fixed: none now. Nothing may join these; the tests below fail when one is fixed, so that it is
# taken off.
PENDING_CIRCLES: list[set[str]] = []
PENDING_LONG: set[str] = set()
ENTRY_POINTS = {"__main__", "cli", "allreduce_sweep", "gpu_smoke"}
# Inside the report, the replay engine and the sweep: their parts (subpackages; the replay engine's modules) in
# data-flow order (a later one may import an earlier one, never the reverse), and inside each subpackage its modules
# in tiers, read the same way. A package's command (and the
# report's writer, which joins exports and views) sits at its top, after every subpackage.
REPORT_PARTS = (
    {"decision"},  # the Decision's types (summary.json whole), its claims and how every output writes numbers
    {"analysis"},  # records -> a RunAnalysis -> the run's one answer (a Decision), and the words it is said in
    {"exports"},  # the texts of the files a user pastes or a machine reads
    {"views"},  # the page
    {"worker"},  # what runs beside the main process: figures drawn, files written from the analysis alone
    {"write"},  # the one module that writes the report's files
    {"flags"},  # the command's options, parsed and checked
    {"command"},
)
ANALYSIS_TIERS = (
    {"engine_facts"},  # what an engine's dispatch table is made of: rules citing the released source
    {"engine_flashinfer"},  # FlashInfer's facts, which the engines' tables read (its workspaces' sizes)
    {"engine_sglang_fusion"},  # when SGLang turns FlashInfer's all-reduce on by itself, and what it takes
    {"engine_sglang", "engine_vllm", "engine_switch_rules"},  # the engines' tables
    {"engine_dispatch"},  # the engines' dispatch order per version
    {"routing_candidates", "crossovers"},  # per size, what each implementation took; what crossover searches found
    {"frame", "ops", "doctor_verdicts", "completeness", "routing", "routing_settings", "drift", "spacing"}
    | {"interleaved"},
    {"ranking", "projection", "heatmap", "costmodel_check", "observed", "tuner_rules"},
    {"choices", "nccl_choice"},  # table 1's rows; the chooser of the answer's NCCL environment
    {"run_analysis"},  # the front door
    # how verdicts are worded; what engines read of the run; runs side by side; the claims under the one rule;
    # where the numbers come from; the page's descriptive tables
    {"words", "run_shape", "compared", "claims", "provenance", "page_tables"},
    {"apply", "answer_frames", "box_view"},  # the one file to apply; the per-T tables of (a); the box as shown
    # the Decision's steps, each reading the ones before: the environment, (a), the verify steps
    {"decide_environment", "decide_nccl", "decide_steps"},
    {"decide_routing", "decide_engines", "decide_answers", "decide_plan"},  # routes; engines; per-T answers; plan
    {"decide"},  # the run's one answer, built once from the analysis in those steps
)
DECISION_TIERS = (
    {"formatting", "claim"},  # how every output writes numbers and claims; a claim
    {"tables", "observation"},  # the page's rows; the engine's observation and what explains it
    {"types"},  # the Decision
    {"codec"},  # summary.json read and written
)
EXPORTS_TIERS = (
    {"export_text"},  # how exports write text they did not choose
    {"engine_hints", "confirm"},  # engine_flags.txt's hints; confirm.toml
    {"files"},  # recommend.env, nccl_tuner.conf, nccl-tests tables, results.csv
    {"decision_files"},  # engine_flags.txt's engine block, routing.txt, the terminal's answer lines
)

REPLAY_PARTS = (
    # the clocks, the tensors, the graph-mode per-op pass, how many steps a mode runs
    {"timing", "replay_tensors", "captured_ops", "step_counts"},
    {"spacers", "agreement"},  # what the harness runs between collectives, the arrival stamps; one verdict of all ranks
    {"harness"},  # the timed, verified step replay
    {"profile_pass", "size_timing"},  # a trace of a few steps; one all-reduce size timed (crossover search)
    {"trial"},  # one point in a fresh process group, in a worker on every rank
    {"forkserver"},  # the server that forks the workers
)
SWEEP_PARTS = (
    {"planning"},  # pure: the sweep file into points, stages and searches, what a launch refuses, the dry run
    {"running"},  # processes, ranks and files
    {"command"},
)
PLANNING_TIERS = (
    {"spec", "crossover", "graph_axis"},  # the parsed sweep; the crossover search; the graph axis
    {"points", "settings"},  # the points; what a point sets
    {"gate", "staging"},  # what a launch refuses; which points a stage refines
    {"interleave"},  # what a sweep measures again beside the baseline before anything may become the answer
    {"stage_config", "crossover_stage", "dryrun", "run_table"},  # a stage, the dry run, the [run] table
    {"config"},  # the sweep file read into a spec
)
RUNNING_TIERS = (
    {"resume", "prebuild", "run_lock", "graph_run", "memory", "nccl_summary"},
    {"measure"},
    {"repeats", "crossover_run", "preparation", "interleaved"},
    {"runner"},
    {"console", "probe"},
    {"run_folder"},
)
INNER_TIERS = {
    ("report", "decision"): DECISION_TIERS,
    ("report", "analysis"): ANALYSIS_TIERS,
    ("report", "exports"): EXPORTS_TIERS,
    ("sweep", "planning"): PLANNING_TIERS,
    ("sweep", "running"): RUNNING_TIERS,
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _nodes_of(source: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(source)))


@pytest.fixture(scope="module", autouse=True)
def _parsed_once():
    """The parsed package (some 80 MB) is let go when this file's tests end."""
    yield
    _nodes_of.cache_clear()


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at `path`, in ast.walk's order: each source parsed once per process (the checks
    below read the whole package several times over; a planted copy is another source, parsed apart)."""
    return _nodes_of(path.read_text(encoding="utf-8"))


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """commprof module -> the commprof modules it imports (a `from package import name` counts as the module
    `package.name` where that is one, else as `package`)."""
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(p, package) for p in paths}
    root = package.name
    graph: dict[str, set[str]] = {}
    for path in paths:
        name = module_name(path, package)
        package_of = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in nodes(path):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.split(".")[0] == root)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package_of.split(".")[: len(package_of.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                if base.split(".")[0] != root:
                    continue
                for alias in node.names:
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        graph[name] = {t for t in targets if t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Every import circle: the groups of modules that import each other, directly or around a loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while not group or node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.append(group)

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return found


def back_edges(graph: dict[str, set[str]], tiers, unit_of, free) -> list[str]:
    """Imports of a unit from a later (or the same, other) tier: "importer -> imported" lines."""
    tier = {unit: rank for rank, units in enumerate(tiers) for unit in units}
    found = []
    for importer, imported in sorted(graph.items()):
        a = unit_of(importer)
        if a is None or free(importer, a):
            continue
        for target in sorted(imported):
            b = unit_of(target)
            if b is None or a == b:
                continue
            if a not in tier or b not in tier or tier[b] >= tier[a]:
                found.append(f"{importer} -> {target}")
    return found


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _part_of(package: str):
    """module -> its subpackage (or top-level module) inside commprof.<package>, else None."""

    def unit(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == package else None

    return unit


def _inner_of(package: str, part: str):
    """module -> its module name inside commprof.<package>.<part>, else None."""

    def unit(module: str) -> str | None:
        parts = module.split(".")
        return parts[3] if len(parts) > 3 and parts[1:3] == [package, part] else None

    return unit


def inner_back_edges(graph: dict[str, set[str]]) -> list[str]:
    """The report's, the replay engine's and the sweep's imports against their parts' order, then each subpackage's
    own tiers."""
    found = []
    for package, parts in (("report", REPORT_PARTS), ("replay", REPLAY_PARTS), ("sweep", SWEEP_PARTS)):
        found += back_edges(graph, parts, _part_of(package), lambda module, unit: False)
    for (package, part), tiers in INNER_TIERS.items():
        found += back_edges(graph, tiers, _inner_of(package, part), lambda module, unit: False)
    return found


def test_no_import_circle():
    found = circles(import_graph())
    assert found == PENDING_CIRCLES, (
        f"import circles {[sorted(c) for c in found]}; known and pending: {[sorted(c) for c in PENDING_CIRCLES]} "
        "(a pending one that is gone: remove it from PENDING_CIRCLES)"
    )


def long_files(package: Path = PACKAGE) -> set[str]:
    return {
        str(p.relative_to(package.parent))
        for p in package.rglob("*.py")
        if len(p.read_text(encoding="utf-8").splitlines()) > MAX_LINES
    }


def test_no_file_over_the_line_limit():
    long = long_files()
    assert long == PENDING_LONG, (
        f"over {MAX_LINES} lines (split by job): {sorted(long)}; known and pending: {sorted(PENDING_LONG)} "
        "(a pending one that is short now: remove it from PENDING_LONG)"
    )


def test_stages_import_only_earlier_stages():
    def free(module: str, stage: str) -> bool:
        return stage in ENTRY_POINTS or module.endswith((".command", "_command"))

    assert back_edges(import_graph(), TIERS, _stage, free) == []


def test_sweep_plans_before_it_runs_and_the_report_analyses_before_it_exports_and_shows():
    found = inner_back_edges(import_graph())
    assert sorted(found) == []


def unplaced(package: Path = PACKAGE) -> list[str]:
    """Modules no tier places: stages outside TIERS, report, replay and sweep parts outside their parts or inner
    tiers."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        parts = name.split(".")
        if len(parts) < 2:
            continue
        if parts[1] not in set().union(*TIERS) | ENTRY_POINTS:
            found.append(f"{name}: place in TIERS or ENTRY_POINTS")
        for stage, stage_parts in (("report", REPORT_PARTS), ("replay", REPLAY_PARTS), ("sweep", SWEEP_PARTS)):
            if parts[1] == stage and len(parts) > 2 and parts[2] not in set().union(*stage_parts):
                found.append(f"{name}: place in {stage.upper()}_PARTS")
        tiers = INNER_TIERS.get(tuple(parts[1:3]))
        if tiers is not None and len(parts) > 3 and parts[3] not in set().union(*tiers):
            found.append(f"{name}: place in the tiers of {'.'.join(parts[:3])}")
    return found


def test_every_module_is_placed():
    assert unplaced() == []


def test_long_files_finds_a_planted_one(tmp_path):
    package = tmp_path / "commprof"
    (package / "report").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "report" / "__init__.py").write_text("")
    (package / "report" / "pages.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (package / "report" / "words.py").write_text("x = 1\n" * MAX_LINES)
    assert long_files(package) == {"commprof/report/pages.py"}


# The checks themselves, on small graphs: each finds what it is there to find.


def test_circles_finds_a_type_only_circle(tmp_path):
    package = tmp_path / "commprof"
    (package / "report").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "report" / "__init__.py").write_text("")
    (package / "report" / "render.py").write_text("from commprof.report.answers import words\n")
    (package / "report" / "answers.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from commprof.report.render import Run\n"
    )
    graph = import_graph(package)
    assert graph["commprof.report.render"] == {"commprof.report.answers"}
    assert circles(graph) == [{"commprof.report.answers", "commprof.report.render"}]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize(
    "importer, imported, allowed",
    [
        ("commprof.doctor.env", "commprof.sweep.points", False),  # a box check reading the sweep
        ("commprof.records.files", "commprof.report.frame", False),
        ("commprof.costmodel.simulate", "commprof.report.frame", False),  # the cost model reading the report
        ("commprof.trace.steps", "commprof.costmodel.simulate", False),  # siblings
        ("commprof.impls.registry", "commprof.replay.harness", False),  # an implementation runs no replay
        ("commprof.sweep.running.measure", "commprof.replay.trial", True),
        ("commprof.sweep.measure", "commprof.records.schema", True),
        ("commprof.report.command", "commprof.sweep.config", True),  # a command may reach anywhere
    ],
)
def test_back_edges_are_found(importer, imported, allowed):
    def free(module: str, stage: str) -> bool:
        return stage in ENTRY_POINTS or module.endswith((".command", "_command"))

    found = back_edges({importer: {imported}}, TIERS, _stage, free)
    assert found == ([] if allowed else [f"{importer} -> {imported}"])


@pytest.mark.parametrize(
    "importer, imported, allowed",
    [
        ("commprof.report.analysis.frame", "commprof.report.exports.files", False),  # analysis reads no export
        ("commprof.report.analysis.run_analysis", "commprof.report.views.page", False),  # ... and no view
        ("commprof.report.exports.files", "commprof.report.views.answers", False),  # an export reads no view
        ("commprof.report.decision.types", "commprof.report.analysis.decide", False),  # the Decision's types first
        ("commprof.report.views.page", "commprof.report.write", False),
        ("commprof.report.analysis.frame", "commprof.report.analysis.run_analysis", False),  # inner order
        ("commprof.report.exports.export_text", "commprof.report.exports.files", False),
        ("commprof.sweep.planning.staging", "commprof.sweep.running.runner", False),  # planning runs nothing
        ("commprof.replay.harness", "commprof.replay.trial", False),  # the harness knows no worker
        ("commprof.replay.timing", "commprof.replay.captured_ops", False),  # siblings
        ("commprof.sweep.planning.spec", "commprof.sweep.planning.config", False),
        ("commprof.sweep.running.measure", "commprof.sweep.running.runner", False),
        ("commprof.sweep.running.runner", "commprof.sweep.command", False),
        ("commprof.report.views.page", "commprof.report.analysis.frame", True),
        ("commprof.report.analysis.decide", "commprof.report.decision.types", True),
        ("commprof.report.write", "commprof.report.views.page", True),
        ("commprof.report.command", "commprof.report.write", True),
        ("commprof.report.analysis.run_analysis", "commprof.report.analysis.frame", True),
        ("commprof.replay.trial", "commprof.replay.harness", True),
        ("commprof.sweep.running.runner", "commprof.sweep.planning.staging", True),
        ("commprof.sweep.command", "commprof.sweep.running.runner", True),
        ("commprof.sweep.running.runner", "commprof.sweep.running.measure", True),
    ],
)
def test_inner_back_edges_are_found(importer, imported, allowed):
    found = inner_back_edges({importer: {imported}, imported: set()})
    assert found == ([] if allowed else [f"{importer} -> {imported}"])


def test_unplaced_finds_a_new_module(tmp_path):
    package = tmp_path / "commprof"
    for folder, module in (
        ("report/analysis", "frame"),
        ("report/analysis", "new_analysis"),
        ("report", "new_top"),
        ("replay", "new_layer"),
        ("sweep/running", "runner"),
    ):
        (package / folder).mkdir(parents=True, exist_ok=True)
        (package / folder / f"{module}.py").write_text("")
    assert unplaced(package) == [
        "commprof.replay.new_layer: place in REPLAY_PARTS",
        "commprof.report.analysis.new_analysis: place in the tiers of commprof.report.analysis",
        "commprof.report.new_top: place in REPORT_PARTS",
    ]


# Pure units: planning and analysis, decided from what they are given. They import no module that starts
# processes, writes files or talks to other ranks; those live at the edges (commands, the sweep's runner).
PURE_UNITS = (
    "commprof.planner",
    "commprof.evidence",
    "commprof.nccl_vocab",
    "commprof.sweep.planning",
    "commprof.report.analysis",
    "commprof.report.exports",
    "commprof.report.views",
)
IMPURE_MODULES = (
    "subprocess",
    "multiprocessing",
    "concurrent",
    "signal",
    "socket",
    "shutil",
    "tempfile",
    "torch.distributed",
    "commprof.replay.forkserver",
    "commprof.records.files",
    "commprof.records.folder",
    "commprof.sweep.running",
)


def impure_imports(package: Path = PACKAGE, pure=PURE_UNITS) -> list[str]:
    """ "module -> imported" for each import of an IMPURE_MODULES module (or one inside it) by a pure unit."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        if not any(name == unit or name.startswith(unit + ".") for unit in pure):
            continue
        for node in nodes(path):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for imported in names:
                if any(imported == bad or imported.startswith(bad + ".") for bad in IMPURE_MODULES):
                    found.append(f"{name} -> {imported}")
                    break
    return found


def test_pure_units_start_no_process_write_no_file_and_talk_to_no_rank():
    assert impure_imports() == []


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess\n",
        "from torch.distributed import all_reduce\n",
        "from commprof.records.files import x\n",
        "from commprof.records.folder import write_nofollow\n",
        "from commprof.sweep.running.runner import run_sweep\n",
    ],
)
@pytest.mark.parametrize("pure", ["planner", "sweep/planning", "report/analysis", "report/exports", "report/views"])
def test_impure_imports_finds_a_planted_one(tmp_path, source, pure):
    package = tmp_path / "commprof"
    (package / pure).mkdir(parents=True)
    for folder in [Path(pure), *Path(pure).parents]:
        (package / folder / "__init__.py").write_text("")
    (package / pure / "plan.py").write_text(source)
    (package / pure / "clean.py").write_text("import json\nfrom commprof.sweep.planning.spec import SweepSpec\n")
    (package / "sweep" / "running").mkdir(parents=True, exist_ok=True)
    (package / "sweep" / "running" / "runner.py").write_text("import subprocess\n")  # impure, and not pure
    found = impure_imports(package)
    name = "commprof." + pure.replace("/", ".")
    assert len(found) == 1 and found[0].startswith(f"{name}.plan -> "), found


# Functions of more than six parameters take a typed object instead. A click command's parameters are its
# command-line options, one each, so commands are exempt.
MAX_PARAMETERS = 6


def wide_functions(package: Path = PACKAGE) -> set[str]:
    """ "module.function" for each function of more than MAX_PARAMETERS parameters (self and cls not counted)."""
    found = set()
    for path in sorted(package.rglob("*.py")):
        for node in nodes(path):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_command(node):
                continue
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            if names[:1] in (["self"], ["cls"]):
                names = names[1:]
            if len(names) > MAX_PARAMETERS:
                found.add(f"{module_name(path, package)}.{node.name}")
    return found


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated with click (@click.command, @click.option, ...): its parameters are command-line options."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        while isinstance(target, ast.Attribute):
            target = target.value
        if isinstance(target, ast.Name) and target.id == "click":
            return True
    return False


def test_no_function_takes_more_than_six_parameters():
    found = wide_functions()
    assert found == set(), f"over {MAX_PARAMETERS} parameters (take a typed object): {sorted(found)}"


def test_wide_functions_finds_a_planted_one(tmp_path):
    package = tmp_path / "commprof"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "wide.py").write_text(
        "import click\n"
        "def narrow(self, a, b, c, d, e, f): ...\n"
        "def wide(a, b, c, d, *, e, f, g): ...\n"
        "@click.command()\n@click.option('--a')\ndef command(a, b, c, d, e, f, g): ...\n"
    )
    assert wide_functions(package) == {"commprof.wide.wide"}


# Tables built from the registry: each built-in states every fact they read in its own module (an empty tuple or
# a sentence saying why there is none, never the base class's default), and each table holds what it states.
REGISTRY_FACTS = ("engine_switches", "engine_flags", "trace_kernels", "smoke")


def registry_gaps(
    classes: dict, smoke: set[str], kernels: set[str], runs_as: dict, switches: set[str], flags: set[str]
) -> list[str]:
    """ "name: fact" for each built-in that leaves a fact to the base class, or that a table lacks."""
    from commprof.impls.base import AllReduceImpl, SmokeCase, TraceKernels

    gaps = []
    for name, cls in classes.items():
        for fact in REGISTRY_FACTS:
            if next(k for k in cls.__mro__ if fact in k.__dict__) is AllReduceImpl:
                gaps.append(f"{name}: {fact} not declared")
        if isinstance(cls.smoke, SmokeCase) != (name in smoke):
            gaps.append(f"{name}: smoke")
        own = isinstance(cls.trace_kernels, TraceKernels)
        if own != (name in kernels) or (not own and cls.trace_kernels in classes) != (name in runs_as):
            gaps.append(f"{name}: trace_kernels")
        if bool(cls.engine_switches) != (name in switches):
            gaps.append(f"{name}: engine_switches")
        if bool(cls.engine_flags) != (name in flags):
            gaps.append(f"{name}: engine_flags")
    return gaps


def _tables() -> tuple[set[str], set[str], dict, set[str], set[str]]:
    from commprof.gpu_smoke.points import impl_points
    from commprof.impls.registry import engine_flag_table, engine_switch_table
    from commprof.trace.kernels import kernel_names, runs_as

    smoke = {p.table["impl"] for p in impl_points()}
    kernels = {k.implementation for k in kernel_names()}
    return smoke, kernels, runs_as(), set(engine_switch_table()), set(engine_flag_table())


def test_every_registered_implementation_is_in_every_table_built_from_the_registry():
    from commprof.impls.registry import builtin_classes

    assert registry_gaps(builtin_classes(), *_tables()) == []


def test_registry_gaps_finds_a_planted_one():
    from commprof.impls.base import AllReduceImpl
    from commprof.impls.registry import builtin_classes

    class Undeclared(AllReduceImpl):
        name = "undeclared"

    smoke, kernels, runs_as, switches, flags = _tables()
    classes = {**builtin_classes(), "undeclared": Undeclared}
    assert registry_gaps(classes, smoke, kernels, runs_as, switches, flags) == [
        f"undeclared: {fact} not declared" for fact in REGISTRY_FACTS
    ]
    assert registry_gaps(builtin_classes(), smoke - {"b12x"}, kernels, runs_as, switches - {"b12x"}, flags) == [
        "b12x: smoke",
        "b12x: engine_switches",
    ]
    assert registry_gaps(builtin_classes(), smoke, kernels, runs_as, switches, set()) == [
        "flashinfer-fused: engine_flags"
    ]


def sweep_reads(graph: dict[str, set[str]]) -> list[str]:
    """ "module -> imported" for each report module importing the sweep: the report counts what was planned from
    the run folder (plan.jsonl, meta.json), never by re-running the sweep's planning."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("commprof.report.")
        for target in targets
        if target == "commprof.sweep" or target.startswith("commprof.sweep.")
    )


def test_the_report_reads_no_sweep_internals():
    assert sweep_reads(import_graph()) == []


def test_sweep_reads_finds_a_planted_one():
    graph = {"commprof.report.completeness": {"commprof.sweep.staging", "commprof.records.files"}}
    assert sweep_reads(graph) == ["commprof.report.completeness -> commprof.sweep.staging"]


# matplotlib (a fifth of a small report's CPU to import) is imported by the figures' modules alone, and those are
# imported by no module: views/drawing.py imports them by name in the process that draws, the report's figure
# worker, so the command's and the render's processes never import matplotlib.
FIGURE_MODULES = {"commprof.report.views.figures", "commprof.report.views.drift_figure"}


def matplotlib_importers(package: Path = PACKAGE) -> list[str]:
    """ "module -> imported" for each import of matplotlib, or of a figures' module, outside FIGURE_MODULES."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        if name in FIGURE_MODULES:
            continue
        for node in nodes(path):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [
                f"{name} -> {imported}"
                for imported in names
                if imported.split(".")[0] == "matplotlib" or imported in FIGURE_MODULES
            ][:1]
    return found


def test_only_the_figures_modules_import_matplotlib_and_nothing_imports_them():
    assert matplotlib_importers() == []


@pytest.mark.parametrize(
    "source", ["import matplotlib.pyplot as plt\n", "from commprof.report.views.figures import to_svg\n"]
)
def test_matplotlib_importers_finds_a_planted_one(tmp_path, source):
    package = tmp_path / "commprof"
    (package / "report" / "views").mkdir(parents=True)
    (package / "report" / "views" / "figures.py").write_text("import matplotlib\n")
    (package / "report" / "views" / "page.py").write_text(source)
    assert matplotlib_importers(package) == [f"commprof.report.views.page -> {source.split()[1]}"]


# Outputs render, never judge: the page's views, the exported files' texts and the terminal summaries take the
# run's Decision (commprof.report.decision: its types, its claims and how numbers are written) and nothing else of
# the report's analysis, not even a type; none of them applies the evidence's rule itself.
RENDERERS = ("report/views", "report/exports", "sweep/running/console.py", "costmodel/simulate_command.py")
ANALYSIS = "commprof.report.analysis"
# The rule's entry points (evidence.py, analysis/claims.py): a renderer that calls one judges on its own.
JUDGING_CALLS = {"beats", "rule", "error_terms", "compare", "derive", "judge"}
# The analysis's candidates beside the Decision: a renderer reads the Decision's point, never these.
RUN_CANDIDATES = {"recommended", "reference", "nccl_choice"}


def _renderer_files(package: Path) -> list[Path]:
    found = []
    for place in RENDERERS:
        path = package / place
        found += sorted(path.glob("*.py")) if path.is_dir() else [path] if path.exists() else []
    return found


def _imported(node: ast.AST) -> str | None:
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return node.module
    return node.names[0].name if isinstance(node, ast.Import) else None


def render_judgements(package: Path = PACKAGE) -> tuple[set[str], list[str]]:
    """(the analysis modules renderers import, the places a renderer applies the evidence's rule itself or reads the
    analysis's candidate instead of the Decision's: "module:line name")."""
    imports, judged = set(), []
    for path in _renderer_files(package):
        name = module_name(path, package)
        for node in nodes(path):
            module = _imported(node)
            if module is not None and (module == ANALYSIS or module.startswith(ANALYSIS + ".")):
                imports.add(f"{name}: {module.removeprefix(ANALYSIS + '.')}")
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in JUDGING_CALLS:
                    judged.append(f"{name}:{node.lineno} {called}")
            elif isinstance(node, ast.Attribute) and node.attr in RUN_CANDIDATES:
                if isinstance(node.value, ast.Name) and node.value.id == "run":
                    judged.append(f"{name}:{node.lineno} run.{node.attr}")
    return imports, judged


def test_outputs_render_the_decision_and_never_judge():
    imports, judged = render_judgements()
    assert judged == [], (
        f"renderers applying the evidence's rule or reading the analysis's candidate themselves: {judged}"
    )
    assert imports == set(), f"renderers importing the analysis (they take the Decision alone): {sorted(imports)}"


def test_a_planted_view_that_judges_its_own_beyond_fails_the_rule(tmp_path):
    package = tmp_path / "commprof"
    views = package / "report" / "views"
    views.mkdir(parents=True)
    for folder in (package, package / "report", views):
        (folder / "__init__.py").write_text("")
    (views / "card.py").write_text(
        "from commprof.report.decision.types import Decision\n"
        "from commprof.report.analysis.ranking import recommendation\n"
        "from commprof.report.analysis.run_analysis import RunAnalysis\n"
        "def card(run, decision: Decision):\n"
        "    beyond = run.evidence.beats(run.after_us, run.after_p90_us, run.before_us)\n"
        "    label = '(a)' if run.reference != run.baseline else '(a) kept'\n"
        "    return 'beyond model error' if beyond else decision.evidence + label\n"
    )
    (views / "export.py").write_text("import commprof.report.analysis.words\n")
    imports, judged = render_judgements(package)
    assert imports == {
        "commprof.report.views.card: ranking",
        "commprof.report.views.card: run_analysis",  # a type of the analysis is the analysis too
        "commprof.report.views.export: words",
    }
    assert sorted(judged) == ["commprof.report.views.card:5 beats", "commprof.report.views.card:6 run.reference"]


# The Decision is built in small steps a reader follows: every function of its modules (the analysis's steps, its
# claims, the file chosen to apply, the page's tables) and of the renderers is radon grade C or better.
DECISION_MODULES = (
    "report/decision/*.py",
    "report/analysis/decide*.py",
    "report/analysis/claims.py",
    "report/analysis/apply.py",
    "report/analysis/page_tables.py",
    "report/exports/*.py",
    "report/views/*.py",
)
MAX_COMPLEXITY = 20  # radon's grade C ends here


def complex_functions(package: Path = PACKAGE) -> list[str]:
    """ "module.function (complexity)" for each function of DECISION_MODULES above MAX_COMPLEXITY."""
    from radon.complexity import cc_visit

    found = []
    for pattern in DECISION_MODULES:
        for path in sorted(package.glob(pattern)):
            for block in cc_visit(path.read_text(encoding="utf-8")):
                if block.complexity > MAX_COMPLEXITY:
                    found.append(f"{module_name(path, package)}.{block.name} ({block.complexity})")
    return found


def test_every_function_of_the_decision_is_grade_c_or_better():
    assert complex_functions() == []


def test_complex_functions_finds_a_planted_one(tmp_path):
    package = tmp_path / "commprof"
    (package / "report" / "analysis").mkdir(parents=True)
    branches = "".join(f"    if x == {k}:\n        return {k}\n" for k in range(MAX_COMPLEXITY + 1))
    (package / "report" / "analysis" / "decide_plan.py").write_text(f"def tangled(x):\n{branches}    return x\n")
    (package / "report" / "analysis" / "frame.py").write_text(f"def elsewhere(x):\n{branches}    return x\n")
    assert complex_functions(package) == [f"commprof.report.analysis.decide_plan.tangled ({MAX_COMPLEXITY + 2})"]


def tuning_lists(package: Path = PACKAGE, names: tuple[str, ...] | None = None) -> list[str]:
    """ "module:line" of each literal collection outside nccl_tuning that writes out more than half of NCCL's tuning
    variables: a second list of what commprof.nccl_tuning.TUNING defines once (a smaller subset is a fact of its own,
    such as the variables the cost model reads)."""
    from commprof.nccl_tuning import TUNING_NAMES

    wanted = set(TUNING_NAMES if names is None else names)
    found = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        if module == f"{package.name}.nccl_tuning":
            continue
        for node in nodes(path):
            if isinstance(node, ast.Dict):
                items = node.keys
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                items = node.elts
            else:
                continue
            listed = {item.value for item in items if isinstance(item, ast.Constant) and item.value in wanted}
            if 2 * len(listed) > len(wanted):
                found.append(f"{module}:{node.lineno}")
    return found


def test_the_nccl_tuning_variables_are_written_out_once():
    assert tuning_lists() == []


def test_tuning_lists_finds_a_planted_one(tmp_path):
    package = tmp_path / "commprof"
    (package / "doctor").mkdir(parents=True)
    names = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NTHREADS", "NCCL_BUFFSIZE")
    (package / "nccl_tuning.py").write_text(f"TUNING = {list(names)!r}\n")
    (package / "doctor" / "env.py").write_text(f"FORCED = {names[:3]!r}\nMODELLED = {{{names[0]!r}: 1}}\n")
    assert tuning_lists(package, names) == ["commprof.doctor.env:1"]
