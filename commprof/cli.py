"""`commprof` / `python -m commprof`: one click group; each subcommand is `command.py` of the stage it drives."""

from __future__ import annotations

import importlib
import sys

import click

from commprof.errors import run_command

# Subcommand -> "module:attribute" of its click command, imported only when invoked (keeps start-up fast
# and keeps pandas / FlashInfer out of commands that do not need them).
SUBCOMMANDS: dict[str, str] = {
    "plan": "commprof.planner.command:plan",
    "topo": "commprof.doctor.command:topo",
    "nccl-log": "commprof.nccl_log.command:nccl_log",
    "nccl-graph": "commprof.nccl_graph.command:nccl_graph",
    "trace": "commprof.trace.command:trace",
    "doctor": "commprof.doctor.command:doctor",
    "floor": "commprof.floor.command:floor",
    "report": "commprof.report.command:report",
    "import-nccl-tests": "commprof.costmodel.command:import_nccl_tests",
    "calibrate": "commprof.costmodel.calibrate_command:calibrate",
    "simulate": "commprof.costmodel.simulate_command:simulate",
}

_HELP = {
    "plan": "Print the ordered collectives of one step.",
    "topo": "Probe GPUs, PCIe links and peer-to-peer topology.",
    "nccl-log": "Explain an NCCL_DEBUG=INFO log: what NCCL built, chose and ran.",
    "nccl-graph": "Write NCCL_GRAPH_FILE candidates for a box (from a doctor bundle or a run).",
    "trace": "Read profiler traces: the step's collectives, their time, overlap and rank skew.",
    "doctor": "Check the box before trusting any number.",
    "floor": "Measure peer copies and print the all-reduce floor per size.",
    "report": "Render a run (or several) as an HTML report.",
    "import-nccl-tests": "Turn nccl-tests logs into commprof records.",
    "calibrate": "Fit the cost model to measured records.",
    "simulate": "Predict a sweep on a topology with the cost model.",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(SUBCOMMANDS)

    def get_command(self, ctx, name):
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, _HELP.get(name, "")) for name in SUBCOMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    help="Multi-GPU communication profiler and NCCL tuner for LLM inference. "
    "Measure with `torchrun --nproc-per-node N -m commprof.allreduce_sweep`.",
)
@click.version_option(package_name="commprof")
def cli():
    pass


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; UsageError and click's usage errors become one line on stderr and exit status 2."""
    return run_command(cli, argv, "commprof")


if __name__ == "__main__":
    sys.exit(main())
