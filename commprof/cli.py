"""`commprof` / `python -m commprof`: one click group; each subcommand is `command.py` of the stage it drives."""

from __future__ import annotations

import importlib
import sys

import click

from commprof.errors import run_command

# Subcommand -> ("module:attribute" of its click command, its one-line help). The command is imported only when
# invoked (keeps start-up fast and keeps pandas / FlashInfer out of commands that do not need them).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("commprof.planner.command:plan", "Print the ordered collectives of one step."),
    "topo": ("commprof.doctor.command:topo", "Probe GPUs, PCIe links and peer-to-peer topology."),
    "nccl-log": (
        "commprof.nccl_log.command:nccl_log",
        "Explain an NCCL_DEBUG=INFO log: what NCCL built, chose and ran.",
    ),
    "nccl-graph": (
        "commprof.nccl_graph.command:nccl_graph",
        "Write NCCL_GRAPH_FILE candidates for a box (from a doctor bundle or a run).",
    ),
    "trace": (
        "commprof.trace.command:trace",
        "Read profiler traces: the step's collectives, their time, overlap and rank skew.",
    ),
    "doctor": ("commprof.doctor.command:doctor", "Check the box before trusting any number."),
    "floor": ("commprof.floor.command:floor", "Measure peer copies and print the all-reduce floor per size."),
    "report": ("commprof.report.command:report", "Render a run (or several) as an HTML report."),
    "import-nccl-tests": (
        "commprof.costmodel.command:import_nccl_tests",
        "Turn nccl-tests logs into commprof records.",
    ),
    "calibrate": ("commprof.costmodel.calibrate_command:calibrate", "Fit the cost model to measured records."),
    "simulate": ("commprof.costmodel.simulate_command:simulate", "Predict a sweep on a topology with the cost model."),
    "explain": (
        "commprof.explain.command:explain",
        "Turn an observed all-reduce time into the box condition that causes it, and the fix.",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module_name, _, attr = SUBCOMMANDS[name][0].partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, help_line) for name, (_, help_line) in SUBCOMMANDS.items()]
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
