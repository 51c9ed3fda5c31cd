"""The page's templates only lay out what the views made: every expression names a value the view gave, every
`{% if %}` asks whether one is there, and every template file is part of the page and ships with the package."""

from __future__ import annotations

from pathlib import Path

import jinja2
import tomllib
from jinja2 import nodes

from commprof.report.views.templating import templates

PACKAGE = Path(__file__).resolve().parents[1] / "commprof"
TEMPLATES = PACKAGE / "report" / "templates"
# Logic a view does instead: filters and tests, comparisons, and/or, inline ifs, calls (methods included),
# indexing, concatenation and arithmetic, literals (wording), and `loop.` (joins by position).
LOGIC = (
    nodes.Filter,
    nodes.Test,
    nodes.Compare,
    nodes.And,
    nodes.Or,
    nodes.CondExpr,
    nodes.Call,
    nodes.Getitem,
    nodes.Slice,
    nodes.Concat,
    nodes.BinExpr,
    nodes.Neg,
    nodes.Pos,
    nodes.List,
    nodes.Dict,
    nodes.Macro,
)


def template_logic(source: str, name: str = "template") -> list[str]:
    """ "name:line what" for each piece of logic in a template's source."""
    found: list[str] = []

    def visit(node: nodes.Node, parent: nodes.Node | None) -> None:
        what = ""
        if isinstance(node, LOGIC):
            what = type(node).__name__
        elif isinstance(node, nodes.Const) and not isinstance(parent, (nodes.Include, nodes.Keyword)):
            what = f"literal {node.value!r}"
        elif isinstance(node, nodes.Name) and node.name == "loop":
            what = "loop."
        elif isinstance(node, nodes.For) and node.else_:
            what = "for-else"
        if what:
            found.append(f"{name}:{node.lineno} {what}")
        for child in node.iter_child_nodes():
            visit(child, node)

    visit(templates().parse(source), None)
    return found


def template_files() -> dict[str, Path]:
    return {p.relative_to(TEMPLATES).as_posix(): p for p in sorted(TEMPLATES.rglob("*")) if p.is_file()}


def test_templates_hold_no_logic_beyond_presence_and_loops():
    found = [hit for name, path in template_files().items() for hit in template_logic(path.read_text(), name)]
    assert found == [], f"logic the views should do: {found}"


def test_template_logic_finds_a_planted_one():
    source = (
        '{% include "sections/x.html" %}{% autoescape false %}{{ a.b }}{% endautoescape %}\n'
        "{% if a.b %}{% for k, v in a.c %}{{ k }}{% endfor %}{% elif not a.d %}x{% endif %}\n"
        '{{ a.b | join("; ") }}{% if a.b != a.c %}x{% endif %}{{ " s" if a.b }}{{ a.b.replace(" ", "_") }}\n'
        '{% for x in a.b %}{{ x }}{% if not loop.last %}, {% endif %}{% else %}none{% endfor %}{{ a.b[0] ~ "r" }}\n'
    )
    assert template_logic(source) == [
        "template:3 Filter",
        "template:3 literal '; '",
        "template:3 Compare",
        "template:3 CondExpr",
        "template:3 literal ' s'",
        "template:3 Call",
        "template:3 literal ' '",
        "template:3 literal '_'",
        "template:4 for-else",
        "template:4 loop.",
        "template:4 Concat",
        "template:4 Getitem",
        "template:4 literal 0",
        "template:4 literal 'r'",
    ]


def included(name: str, environment: jinja2.Environment) -> set[str]:
    """The templates `name` includes, and theirs."""
    source = (TEMPLATES / name).read_text()
    found = {n.template.value for n in environment.parse(source).find_all(nodes.Include)}
    return found.union(*(included(n, environment) for n in found))


def test_every_template_is_part_of_the_page():
    environment = templates()
    used = {"index.html"} | included("index.html", environment)
    assert used == set(template_files()), f"not included anywhere: {set(template_files()) - used}"
    assert all(name.endswith(".html") for name in used)


def test_every_template_ships_with_the_package():
    """pyproject's package-data globs (setuptools reads them relative to the package, `**` across folders) hold
    every template, so a wheel renders the same page as a checkout."""
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    shipped = {
        p for pattern in pyproject["tool"]["setuptools"]["package-data"]["commprof"] for p in PACKAGE.glob(pattern)
    }
    assert set(template_files().values()) <= shipped


def _refuse_to_compile(*args, **kwargs):
    raise AssertionError("compiled here")


def _page(environment) -> str:
    environment.cache = {}  # compile, or load, every template anew
    return environment.get_template("index.html").render(
        runs=[], comparison=None, banners=[], costmodel_checks=[], band="±10 %", unfused_reference="x", title="t",
        generated="g",
    )  # fmt: skip


def test_templates_compiled_by_an_earlier_report_render_the_page_they_would_compile_to(tmp_path):
    from commprof.report.views import templating

    fresh = _page(templating.templates().overlay(bytecode_cache=None))
    _page(templating.templates().overlay(bytecode_cache=templating.compiled_code(str(tmp_path))))
    assert any(tmp_path.iterdir())  # the earlier report's compiled templates
    later = templating.templates().overlay(bytecode_cache=templating.compiled_code(str(tmp_path)))
    later.compile = _refuse_to_compile  # every template's code is the earlier report's: nothing is compiled here
    assert _page(later) == fresh


def test_a_cache_folder_that_cannot_be_used_compiles_the_templates_here(tmp_path):
    from commprof.report.views import templating

    (tmp_path / "taken").write_text("a file where the folder would be")
    cache = templating.compiled_code(str(tmp_path / "taken"))  # nothing can be read or kept there; nothing fails
    assert _page(templating.templates().overlay(bytecode_cache=cache)) == _page(templating.templates())
