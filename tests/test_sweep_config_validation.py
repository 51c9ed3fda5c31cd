"""Sweep-file validation: every rule names the file, the key and what is allowed; known traps warn."""

from __future__ import annotations

from pathlib import Path

import pytest

from commprof.errors import UsageError
from commprof.nccl_vocab import value_traps
from commprof.sweep import load_sweep, parse_sweep

FIXTURES = Path(__file__).parent / "fixtures" / "sweeps"


def problems(text: str) -> list[str]:
    with pytest.raises(UsageError) as caught:
        parse_sweep(text, "bad.toml")
    lines = str(caught.value).splitlines()
    assert all(line.startswith("bad.toml: ") for line in lines), lines
    return lines


BAD = [
    # structure and unknown keys
    ("[run\n", "bad.toml: not valid TOML"),
    ("nmae = 'x'\n", "bad.toml: nmae: unknown key (allowed: name, description, run,"),
    ("[run]\nmodle = 'kimi-k2.5'\n", "bad.toml: run.modle: unknown key (allowed: model, tp, tokens,"),
    (
        "[axes]\nNCCL_ALOG = ['ring']\n",
        "bad.toml: axes.NCCL_ALOG: unknown key (allowed: impl, channels, ctas, NCCL_ALGO,",
    ),
    ("axes = 3\n", "bad.toml: axes: expected a table, got int"),
    ("[points]\nimpl = 'nccl'\n", "bad.toml: points: expected an array of tables ([[points]])"),
    # [run] types and values
    ("[run]\ntokens = 4\n", "bad.toml: run.tokens: expected a non-empty list of integers >= 1, got 4"),
    ("[run]\ntokens = []\n", "bad.toml: run.tokens: expected a non-empty list"),
    ("[run]\ntokens = [1, 0]\n", "bad.toml: run.tokens[1]: 0 is below 1 (allowed: an integer >= 1)"),
    ("[run]\ntokens = [4, 4]\n", "bad.toml: run.tokens: [4, 4] lists a T twice"),
    ("[run]\niterations = 'many'\n", "bad.toml: run.iterations: expected an integer >= 1, got 'many'"),
    ("[run]\nwarmup = -1\n", "bad.toml: run.warmup: -1 is below 0"),
    ("[run]\ntp = true\n", "bad.toml: run.tp: expected an integer >= 1, got True"),
    ("[run]\npoint_timeout_s = 0\n", "bad.toml: run.point_timeout_s: 0 is out of range (allowed: a number > 0)"),
    ("[run]\nphase = 'prefill'\n", "bad.toml: run.phase: 'prefill' is not a phase (allowed: decode, verify)"),
    ("[run]\ndtype = 'int8'\n", "bad.toml: run.dtype: unsupported dtype 'int8'"),
    ("[run]\nmodel = 'gpt-9'\n", "bad.toml: run.model: unknown model preset 'gpt-9'"),
    ("[run]\ntp = 3\n", "bad.toml: run: kimi-k2.5: TP 3 is impossible: 64 attention heads do not divide by 3"),
    ("[run]\nspec = 'mtp'\nnum_steps = 3\ntokens = [4]\ntp = 8\n", "bad.toml: run: kimi-k2.5: --spec mtp needs"),
    ("[run]\nspec = 'eagle'\nnum_steps = 3\ntokens = [6]\ntp = 8\n", "bad.toml: run: T = 6 is not a whole batch"),
    ("[run]\nspec = 'medusa'\n", "bad.toml: run: unknown speculative method 'medusa'"),
    ("[run]\ndp_attention = 'yes'\n", "bad.toml: run: dp_attention must be true or false"),
    ("[run]\nlayout = 'hybrid:MX'\n", "bad.toml: run.model: preset:kimi-k2.5: hybrid pattern has 'X'"),
    ("[run]\nlayout = 'serial'\n", "bad.toml: run.layout: --layout 'serial' is not a layout"),
    ("[run]\nnum_steps = 'x'\nspec = 'eagle'\n", "bad.toml: run: --num-steps must be an integer, got 'x'"),
    (
        "[run]\ninterconnect = 'pci'\n",
        "bad.toml: run.interconnect: 'pci' is not an interconnect (allowed: any, pcie, nvlink)",
    ),
    # NCCL_ALGO / NCCL_PROTO tokens and syntax
    (
        "[axes]\nNCCL_ALGO = ['Rng']\n",
        "bad.toml: axes.NCCL_ALGO[0]: 'Rng' is not an algorithm (allowed: a comma list of Ring, Tree,",
    ),
    ("[axes]\nNCCL_ALGO = 'ring,tre'\n", "bad.toml: axes.NCCL_ALGO: 'ring,tre': 'tre' is not an algorithm"),
    ("[axes]\nNCCL_ALGO = 'allreduc:tree'\n", "'allreduc' is not a collective (allowed:"),
    ("[axes]\nNCCL_ALGO = 'allreduce:tree;allreduce:ring'\n", "'allreduce' is given twice"),
    ("[axes]\nNCCL_ALGO = 'ring;tree'\n", "'tree' has no collective: only the first segment may omit it"),
    ("[axes]\nNCCL_ALGO = '^'\n", "'' is not an algorithm"),
    ("[axes]\nNCCL_ALGO = ['']\n", "axes.NCCL_ALGO[0]: expected a non-empty string"),
    (
        "[axes]\nNCCL_PROTO = ['LL', 'LL129']\n",
        "bad.toml: axes.NCCL_PROTO[1]: 'LL129' is not a protocol (allowed: a comma list of LL, LL128, Simple",
    ),
    ("[axes]\nNCCL_PROTO = [128]\n", "axes.NCCL_PROTO[0]: expected a non-empty string, got 128"),
    # counts and ranges
    ("[axes]\nchannels = [4, 65]\n", "bad.toml: axes.channels[1]: 65 is out of range (allowed: an integer 1..64)"),
    ("[axes]\nchannels = [0]\n", "axes.channels[0]: 0 is out of range (allowed: an integer 1..64)"),
    ("[axes]\nNCCL_MAX_NCHANNELS = ['four']\n", "axes.NCCL_MAX_NCHANNELS[0]: expected an integer 1..64, got 'four'"),
    ("[axes]\nctas = [128]\n", "axes.ctas[0]: 128 is out of range (allowed: an integer 1..64)"),
    ("[axes]\nNCCL_NTHREADS = [100]\n", "axes.NCCL_NTHREADS[0]: 100 is not a multiple of 32 in 64..512"),
    ("[axes]\nNCCL_NTHREADS = [32]\n", "axes.NCCL_NTHREADS[0]: 32 is not a multiple of 32 in 64..512"),
    ("[axes]\nNCCL_NTHREADS = [1024]\n", "axes.NCCL_NTHREADS[0]: 1024 is not a multiple of 32 in 64..512"),
    ("[axes]\nNCCL_BUFFSIZE = [0]\n", "axes.NCCL_BUFFSIZE[0]: 0 is not positive"),
    (
        "[axes]\nNCCL_P2P_LEVEL = ['NODE2']\n",
        "axes.NCCL_P2P_LEVEL[0]: 'NODE2' is not a P2P level "
        "(allowed: LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or an old integer level 0..5)",
    ),
    ("[axes]\nNCCL_P2P_LEVEL = [-1]\n", "axes.NCCL_P2P_LEVEL[0]: -1 is out of range"),
    ("[axes]\nNCCL_P2P_DISABLE = [2]\n", "axes.NCCL_P2P_DISABLE[0]: 2 is not a switch (allowed: 0, 1, true, false)"),
    ("[axes]\nNCCL_SHM_DISABLE = ['yes']\n", "axes.NCCL_SHM_DISABLE[0]: 'yes' is not a switch"),
    ("[axes]\nNCCL_CUMEM_ENABLE = [0.5]\n", "axes.NCCL_CUMEM_ENABLE[0]: 0.5 is not a switch"),
    ("[axes]\nNCCL_GRAPH_REGISTER = [3]\n", "axes.NCCL_GRAPH_REGISTER[0]: 3 is not a switch"),
    (
        "[axes]\nNCCL_THREAD_THRESHOLDS = ['8 8 64']\n",
        "axes.NCCL_THREAD_THRESHOLDS[0]: '8 8 64' is not six integers (allowed: six integers",
    ),
    ("[axes]\nNCCL_THREAD_THRESHOLDS = [8]\n", "axes.NCCL_THREAD_THRESHOLDS[0]: expected a string, got 8"),
    ("[axes]\nNCCL_PROTO = { LL = 1 }\n", "axes.NCCL_PROTO: expected a value or a list of values, got a table"),
    ("[axes]\nNCCL_PROTO = []\n", "axes.NCCL_PROTO: empty list"),
    # [axes.env]: names checked, known NCCL names validated wherever they appear
    ("[axes.env]\n1BAD = ['x']\n", "axes.env.1BAD: not an environment variable name"),
    ("[axes.env]\nNCCL_NTHREADS = [100]\n", "axes.env.NCCL_NTHREADS[0]: 100 is not a multiple of 32"),
    ("[axes.env]\nCOMMPROF_X = [[1]]\n", "axes.env.COMMPROF_X[0]: expected a string or a number, got list"),
    ('[[points]]\nenv = { COMMPROF_X = "a\\u0000b" }\n', "points[0].env.COMMPROF_X: 'a\\x00b' holds a NUL character"),
    (
        "[axes.env]\nPROMPT_COMMAND = ['x']\n",
        "axes.env.PROMPT_COMMAND: PROMPT_COMMAND is not a tuning variable commprof sweeps or models",
    ),
    # implementations and their options
    (
        "[axes]\nimpl = ['flashinfer']\n",
        "bad.toml: axes.impl[0]: unknown implementation 'flashinfer' (allowed: default, nccl,",
    ),
    ("[axes]\nimpl = ['my.kernels.Fast']\n", "axes.impl[0]: unknown implementation 'my.kernels.Fast'"),
    ("[axes]\nimpl = [3]\n", "axes.impl[0]: expected an implementation name, got 3"),
    (
        "[axes]\nimpl = [{ name = 'flashinfer-fused', options = { use_oneshot = 'yes' } }]\n",
        "axes.impl[0].options.use_oneshot: 'yes' is not a value of flashinfer-fused's option 'use_oneshot' "
        "(allowed: true, false)",
    ),
    (
        "[axes]\nimpl = [{ name = 'symm-mem', options = { variant = 'three_shot' } }]\n",
        "axes.impl[0].options.variant: 'three_shot' is not a value of symm-mem's option 'variant' "
        "(allowed: auto, one_shot, two_shot)",
    ),
    (
        "[axes]\nimpl = [{ name = 'flashinfer-pcie-ipc', options = { tuned = true } }]\n",
        "axes.impl[0].options.tuned: flashinfer-pcie-ipc has no option 'tuned' (allowed: tune)",
    ),
    ("[axes]\nimpl = [{ name = 'nccl', opts = {} }]\n", "axes.impl[0].opts: unknown key (allowed: name, options)"),
    ("[[points]]\nimpl = 'gloo'\noptions = { x = 1 }\n", "points[0].options.x: gloo has no option 'x' (allowed: none)"),
    # explicit points
    ("[[points]]\nNCCL_PROTO = ['LL', 'Simple']\n", "bad.toml: points[0].NCCL_PROTO: a point takes one value per key"),
    (
        "[[points]]\nNCCL_MIN_NCHANNELS = 8\nNCCL_MAX_NCHANNELS = 4\n",
        "bad.toml: points[0]: NCCL_MIN_NCHANNELS=8 is above NCCL_MAX_NCHANNELS=4 (allowed: min <= max)",
    ),
    ("[[points]]\nlabel = 3\n", "points[0].label: expected a string, got 3"),
    ("[[points]]\nreason = 'x'\n", "points[0].reason: unknown key (allowed: impl, channels, ctas,"),
    # exclusions
    (
        "[[exclude]]\nreason = 'everything'\n",
        "bad.toml: exclude[0]: a rule needs at least one condition besides reason",
    ),
    ("[[exclude]]\nNCCL_PROTO = 'LL129'\n", "exclude[0].NCCL_PROTO: 'LL129' is not a protocol"),
    ("[[exclude]]\nimpl = 'nope'\n", "exclude[0].impl: unknown implementation 'nope'"),
    ("[[exclude]]\nlabel = 'x'\n", "exclude[0].label: unknown key (allowed: impl, channels,"),
    # stages
    ("[[stages]]\niterations = 10\n", "bad.toml: stages[0].top_k: missing (allowed: an integer >= 1"),
    ("[[stages]]\ntop_k = 0\niterations = 10\n", "stages[0].top_k: 0 is below 1"),
    ("[[stages]]\ntop_k = 2\n", "bad.toml: stages[0]: a stage needs axes to cross its best points with, or iterations"),
    (
        "[[stages]]\ntop_k = 2\niterations = 5\nrank_by = 'mean'\n",
        "stages[0].rank_by: 'mean' is not a ranking (allowed: geomean, sum)",
    ),
    (
        "[[stages]]\ntop_k = 2\niterations = 5\nkeep = 2\n",
        "stages[0].keep: unknown key (allowed: kind, name, description, top_k,",
    ),
    ("[[stages]]\ntop_k = 2\n[stages.axes]\nchannels = [99]\n", "stages[0].axes.channels[0]: 99 is out of range"),
    (
        "[[stages]]\ntop_k = 2\niterations = 5\ninclude_baseline = 'yes'\n",
        "stages[0].include_baseline: expected true or false",
    ),
    (
        "[[stages]]\ntop_k = 2\niterations = 5\ncandidates = { impl = 'nope' }\n",
        "stages[0].candidates.impl: unknown implementation 'nope'",
    ),
    # report options
    (
        "[run]\ntokens = [1, 4]\n[report]\ncompute_ms = { 8 = 5.0 }\n",
        "bad.toml: report.compute_ms.8: not a T of run.tokens (allowed: 1, 4)",
    ),
    ("[report]\ncompute_ms = -1\n", "report.compute_ms: -1 is out of range (allowed: a number >= 0)"),
    ("[report]\ndraft_ms = 'fast'\n", "report.draft_ms: expected a number >= 0, got 'fast'"),
    ("[report]\ndraft_ms = nan\n", "report.draft_ms: nan is not a finite number (allowed: a number >= 0)"),
    ("[run]\npoint_timeout_s = inf\n", "run.point_timeout_s: inf is not a finite number (allowed: a number > 0)"),
    (
        "[report]\naccept_lengths = [1.5, 0.5]\n",
        "report.accept_lengths[1]: 0.5 is out of range (allowed: a number >= 1)",
    ),
    ("[report]\nbaseline = 'p999'\n", "report.baseline: 'p999' is no stage-0 point id or label (allowed: p000"),
    (
        "[report]\nspeedup = true\n",
        "report.speedup: unknown key (allowed: compute_ms, draft_ms, accept_lengths, baseline)",
    ),
]


@pytest.mark.parametrize("text, expected", BAD, ids=[b[1].removeprefix("bad.toml: ")[:50] for b in BAD])
def test_each_rule_reports_file_key_and_what_is_allowed(text, expected):
    lines = problems(text)
    assert any(expected in line for line in lines), lines


def test_every_problem_in_a_file_is_reported_once_each():
    with pytest.raises(UsageError) as caught:
        load_sweep(FIXTURES / "bad-several.toml")
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert [line.split(": ")[1] for line in lines] == ["run.iterations", "axes.NCCL_PROTO[1]", "axes.channels[1]"]
    assert all(line.startswith(str(FIXTURES / "bad-several.toml")) for line in lines)


def test_missing_file_is_one_line():
    with pytest.raises(UsageError, match="sweep file not found: nowhere.toml"):
        load_sweep("nowhere.toml")


@pytest.mark.parametrize(
    "value",
    [
        "Ring",
        "ring,tree",
        "^tree",
        "allreduce:tree",
        "ring;allreduce:tree",
        "allreduce:^ring",
        "NVLS,Ring",
        "Broadcast:ring;AllReduce:Tree",
    ],
)
def test_legal_algorithm_values(value):
    assert parse_sweep(f"[[points]]\nNCCL_ALGO = {value!r}\n").points[1].env == {"NCCL_ALGO": value}


@pytest.mark.parametrize("value", ["LL", "ll128", "^LL128", "LL,Simple", "allreduce:LL", "Simple;allreduce:LL"])
def test_legal_protocol_values(value):
    assert parse_sweep(f"[[points]]\nNCCL_PROTO = {value!r}\n").points[1].env == {"NCCL_PROTO": value}


def test_legal_edge_values():
    spec = parse_sweep(
        "[[points]]\nchannels = 64\nNCCL_NTHREADS = 64\nNCCL_P2P_LEVEL = 0\n"
        "[[points]]\nchannels = 1\nNCCL_NTHREADS = 512\nNCCL_P2P_LEVEL = 'pxb'\n"
        "NCCL_THREAD_THRESHOLDS = '0 0 0 0 0 0'\n"
    )
    assert spec.points[1].env["NCCL_MIN_NCHANNELS"] == "64" and spec.points[2].env["NCCL_P2P_LEVEL"] == "PXB"


def test_plugin_implementations_are_only_syntax_checked():
    spec = parse_sweep("[axes]\nimpl = ['not_installed.anywhere:Kernel']\n")
    assert spec.points[1].impl == "not_installed.anywhere:Kernel"


def test_plain_tree_warns_and_suggests_allreduce_tree():
    spec = parse_sweep("[axes]\nNCCL_ALGO = ['Tree', 'allreduce:tree', 'ring,tree']\n", "t.toml")
    assert len(spec.warnings) == 1
    assert spec.warnings[0].startswith("t.toml: axes.NCCL_ALGO[0]: NCCL_ALGO='Tree' applies to every collective")
    assert '"allreduce:tree"' in spec.warnings[0]
    assert len(spec.points) == 4  # a warning never drops a point


@pytest.mark.parametrize(
    "value, warns",
    [
        ("Tree", True),
        ("nvls", True),
        ("^ring", True),
        ("Ring", False),
        ("tree,ring", False),
        ("allreduce:tree", False),
        ("ring;allreduce:tree", False),
        ("^tree", False),
    ],
)
def test_ring_disabling_algorithm_values(value, warns):
    assert bool(value_traps("NCCL_ALGO", value)) is warns


def test_forcing_ll128_warns_unless_the_file_targets_nvlink():
    text = "[axes]\nNCCL_PROTO = ['LL128', 'LL,LL128', '^LL128']\n"
    spec = parse_sweep(text, "p.toml")
    assert [w.split(": ")[1] for w in spec.warnings] == ["axes.NCCL_PROTO[0]", "axes.NCCL_PROTO[1]"]
    assert "corrupt" in spec.warnings[0] and "checked" in spec.warnings[0]
    assert parse_sweep("[run]\ninterconnect = 'nvlink'\n" + text).warnings == ()


def test_rules_mentioning_a_trap_value_do_not_warn():
    spec = parse_sweep("[axes]\nNCCL_PROTO = ['LL']\n[[exclude]]\nNCCL_PROTO = 'LL128'\nNCCL_ALGO = 'Tree'\n")
    assert spec.warnings == ()


def test_every_variant_validation_accepts_each_builtin_constructs():
    """What validation accepts, each built-in's constructor accepts; what it requires, the constructor requires."""
    from commprof.impls.base import option_values
    from commprof.impls.registry import BUILTINS, load_impl
    from commprof.sweep.planning.settings import impl_variants

    for name in BUILTINS:
        cls = load_impl(name)
        for options in impl_variants(name):
            parse_sweep(f"[[points]]\nimpl = {name!r}\noptions = {_toml_table(options)}\n")
            cls(options)
            for option, kind in cls.option_kinds.items():
                for value in option_values(kind):
                    cls({**options, option: value})
        if cls.required_options:
            with pytest.raises(UsageError):
                cls({})


def _toml_table(options: dict) -> str:
    return (
        "{ "
        + ", ".join(f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in options.items())
        + " }"
    )


@pytest.mark.parametrize(
    "table",
    [
        '[[points]]\nenv = { TORCH_SYMMMEM = "NCCL" }',
        '[axes.env]\nPYTORCH_CUDA_ALLOC_CONF = ["default", "expandable_segments:True"]',
    ],
)
def test_variables_libtorch_reads_once_are_refused_per_point(table):
    with pytest.raises(UsageError, match=r"read once, when libtorch loads.*set it on the launch instead"):
        parse_sweep(f'name = "x"\n{table}\n')


def test_run_keys_for_the_step_beyond_the_target():
    spec = parse_sweep(
        "[run]\nmodel = 'deepseek-v3'\nspec = 'mtp'\nnum_steps = 1\ndp_attention = true\ntokens = [2, 4]\n"
    )
    assert (spec.plan_options.spec, spec.plan_options.num_steps, spec.plan_options.dp_attention) == ("mtp", 1, True)
    spec.check_plans(8)
    with pytest.raises(UsageError, match="^command line: run: deepseek-v3: TP 6 is impossible"):
        spec.check_plans(6)  # the launch's world size, when the file names no TP
