"""An engine's dispatch rules for the switches the implementations declare (each class's EngineSwitch): a switch
the engine's table already reads is checked against that rule; one it does not (a new implementation) becomes a
rule before the path the switch names, gated by the switch, its size variable and the class's own support() and
support_tokens(). Pure.
"""

from __future__ import annotations

from commprof.impls.base import EngineSwitch, ImplContext
from commprof.impls.registry import builtin_classes
from commprof.planner.models import DTYPE_BYTES
from commprof.report.analysis.engine_facts import Box, Check, Cite, EngineTable, Op, Rule, Switches


def switch_pairs(switch: EngineSwitch) -> list[tuple[str, str]]:
    """ "A=1 B=2" -> [("A", "1"), ("B", "2")]; a bare flag ("--enable-x") is ("--enable-x", "1")."""
    return [tuple((part.split("=", 1) + ["1"])[:2]) for part in switch.switch.split()]  # type: ignore[misc]


def declared_switches(engine: str) -> list[tuple[str, EngineSwitch]]:
    """(implementation, switch) for every built-in declaring a switch of `engine`, in BUILTINS order."""
    return [(name, s) for name, cls in builtin_classes().items() for s in cls.engine_switches if s.engine == engine]


def switch_disagreement(table: EngineTable) -> list[str]:
    """Where a rule of the table and an implementation's declared switch for the same path disagree."""
    problems = []
    for name, switch in declared_switches(table.engine):
        rule = next((r for r in table.rules if r.impl == name), None)
        names = [k for k, _ in switch_pairs(switch)]
        if rule is not None and rule.switch not in names:
            problems.append(f"{table.engine} {table.version}: {rule.path} reads {rule.switch}, {name} declares {names}")
    return problems


def _context(box: Box, op: Op) -> ImplContext:
    major = int(box.sm) if box.sm is not None else None
    return ImplContext(
        backend="nccl",
        world_size=box.tp,
        dtype=op.dtype,
        tokens=(op.tokens,),
        hidden_size=op.hidden,
        device_type="cuda",
        compute_capability=(major, round((box.sm - major) * 10)) if major is not None else None,
        p2p_all_pairs=box.p2p,
        libraries_assumed=True,
    )


def _check(name: str, switch: EngineSwitch, version: str) -> Check:
    pairs = switch_pairs(switch)

    def check(box: Box, op: Op, switches: Switches) -> str | None:
        if version not in switch.released:
            return f"not in {switch.engine} {version}'s release (only {switch.version})"
        missing = [f"{k}={v}" for k, v in pairs if str(switches.get(k, "")).strip() != str(v)]
        if missing:
            return f"{' '.join(missing)} not set"
        cap = switches.get(switch.size_variable or "")
        if cap and str(cap).isdigit():
            size = op.nbytes if switch.unit == "bytes" else op.nbytes // DTYPE_BYTES.get(op.dtype, 2)
            if size > int(cap):
                return f"{size} {switch.unit} > {switch.size_variable}={cap}"
        cls = builtin_classes()[name]
        ctx = _context(box, op)
        gate = cls.support(ctx)
        if gate:
            gate = cls.support_tokens(ctx, op.tokens)
        return None if gate else gate.reason

    return check


def with_switch_rules(table: EngineTable) -> tuple[Rule, ...]:
    """The table's rules, with a derived rule for each declared switch of this engine the table does not read."""
    rules = list(table.rules)
    read = {r.impl for r in rules if r.impl}
    for name, switch in declared_switches(table.engine):
        if name in read:
            continue
        at = next((i for i, r in enumerate(rules) if r.path == switch.before), len(rules) - 1)
        cite = Cite(switch.version)
        rules.insert(
            at, Rule(name, (cite,), _check(name, switch, table.version), impl=name, switch=switch_pairs(switch)[0][0])
        )
        read.add(name)
    return tuple(rules)
