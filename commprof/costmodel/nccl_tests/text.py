"""Parse nccl-tests (*_perf) text output as people post it: tables in prose or markdown, several runs per file, -I.

Pure: text in, rows and warnings out. The column layout is read from each table's header line, so the
older 12-column tables, the -I per-iteration columns (i_min i_max i_p99 i_cv%) and the -S timestamp column
all parse with one code path. Format source: NVIDIA/nccl-tests src/util.cu (writeResultHeader,
writeBenchmarkLineBody, writePerIterReport, writeResultFooter, jsonOutputInit), nccl-tests 2.19.6.
"""

from __future__ import annotations

import re
from dataclasses import replace

from commprof.costmodel.nccl_tests.json_file import parse_json
from commprof.costmodel.nccl_tests.log import (
    DTYPES,
    PROGRAM,
    LongNumber,
    ParsedLog,
    RefusedRow,
    Row,
    Run,
    header_problem,
    latency,
    optional_float,
    size,
    stated_count,
)
from commprof.errors import UsageError

# The header, rank, version and footer lines start with "#"; logs pasted through a renderer that ate it still
# carry them, so each is read with or without.
_RUN_LINE = re.compile(r"#?\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\b(.*)")
_RANK_LINE = re.compile(r"#?\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)")
_FOOTER = re.compile(r"#?\s*(Avg bus bandwidth|Out of bounds values)\s*:")
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z_0-9]+\s+\S+")
_TIMESTAMP = re.compile(r"\s+\d{4}-\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}\s*$")
# Output lines prefixed by `mpirun --tag-output` ("[1,0]<stdout>:", the process rank second) or quoted in
# markdown ("> ").
_PREFIX = re.compile(r"^(?:\[\d+,(\d+)\]<stdout>:|>\s?)")
# "# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003" (NCCL_VERSION_CODE: major*10000 + minor*100
# + patch since NCCL 2.9), and NCCL's own "NCCL version 2.19.3+cuda12.3" (NCCL_DEBUG=INFO, or printed by tests).
_TESTS_VERSION = re.compile(r"#?\s*nccl-tests version\s+\S+.*\bnccl-library=(\d+)")
_NCCL_VERSION = re.compile(r"\bNCCL version\s+(\d+\.\d+\.\d+)")
# The NCCL settings a log states: on the command line ("NCCL_P2P_LEVEL=SYS ./build/all_reduce_perf ...",
# "export NCCL_P2P_LEVEL=SYS") and in NCCL's own "NCCL INFO NCCL_P2P_LEVEL set by environment to SYS".
_ENV_ASSIGN = re.compile(r"(?:^|[\s;$#])(NCCL_[A-Z0-9_]+)=([^\s;'\"]+)")
_ENV_INFO = re.compile(r"\bNCCL INFO (NCCL_[A-Z0-9_]+) set by environment to ([^\s.]+)")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")


def _nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE as a version: major*10000 + minor*100 + patch (NCCL >= 2.9), else major*1000 + ..."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _header_columns(line: str) -> list[str] | None:
    """Column names of a table header ("#  size  count  type  redop  root  time  algbw ..."), else None."""
    tokens = line.lstrip("#").split()
    if len(tokens) < 6 or tokens[:2] != ["size", "count"]:
        return None
    return tokens


def _layout(columns: list[str]) -> tuple[int, list[tuple[str, list[str]]]]:
    """Number of leading fields and the [(place, per-place columns)] that follow them."""
    lead = 0
    while lead < len(columns) and columns[lead] in ("size", "count", "type", "redop", "root"):
        lead += 1
    rest = [c for c in columns[lead:] if c != "timestamp"]
    group = ["time"]
    for name in rest[1:]:
        if name in ("time", "cputime"):
            break
        group.append(name)
    places = ["out_of_place", "in_place"][: max(1, len(rest) // len(group))]
    return lead, [(place, group) for place in places]


def _parse_row(text: str, number: int, columns: list[str]) -> Row:
    """One table row under `columns`; ValueError says what does not fit."""
    text = _TIMESTAMP.sub("", text)
    tokens = text.split()
    lead, places = _layout(columns)
    expected = lead + sum(len(group) for _, group in places)
    if len(tokens) != expected:
        raise ValueError(f"{len(tokens)} fields where the header has {expected}")
    head = dict(zip(columns[:lead], tokens[:lead]))
    row = Row(
        line=number,
        bytes=size(head["size"]),
        count=size(head["count"], "count"),
        dtype=DTYPES.get(head.get("type", ""), head.get("type", "")),
        redop=head.get("redop", "none"),
        root=int(head.get("root", -1)),
    )
    position = lead
    for place, group in places:
        values = dict(zip(group, tokens[position : position + len(group)]))
        position += len(group)
        if values["time"].upper() == "N/A":
            raise ValueError("time is N/A")
        time_us = latency(values["time"])
        if "error" in values:
            # Old nccl-tests printed the largest error, not a count: 0 means none wrong, else the count is unknown.
            error = optional_float(values["error"])
            wrong = 0 if error == 0 else None
        else:
            count = optional_float(values.get("#wrong", "N/A"))
            wrong = None if count is None else int(count)
        entry = {
            "time_us": time_us,
            "algbw_gbps": optional_float(values.get("algbw", "N/A")),
            "busbw_gbps": optional_float(values.get("busbw", "N/A")),
            "wrong": wrong,
        }
        per_iter = {name: optional_float(values[name]) for name in _PER_ITER if name in values}
        if per_iter:
            entry["per_iteration"] = {
                "min_us": per_iter.get("i_min"),
                "max_us": per_iter.get("i_max"),
                "p99_us": per_iter.get("i_p99"),
                "cv_pct": per_iter.get("i_cv%"),
            }
        row.places[place] = entry
    return row


def parse_text(text: str, path: str = "<text>") -> ParsedLog:
    """All runs of a text log. A file without any nccl-tests table is a UsageError naming it."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"results"' in stripped:
        return parse_json(text, path)
    reader = _TextReader(path)
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            reader.read_line(number, raw)
        except LongNumber as exc:
            raise UsageError(f"{path}:{number}: {exc}, which no nccl-tests log states") from None
    return reader.finish()


class _TextReader:
    """Line-by-line state of one text log: the runs so far, the table being read, what the text has named."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.runs: list[Run] = []
        self.warnings: list[str] = []
        self.program: str | None = None  # last *_perf named in the text (command line or "Collective test starting")
        self.version: str | None = None  # the last NCCL version the text states
        self.env: dict[str, str] = {}  # the NCCL settings the text's command lines state, for the runs that follow
        self.run: Run | None = None
        self.columns: list[str] | None = None
        self.in_table = False

    def current_run(self, number: int) -> Run:
        if self.run is None:
            self.run = Run(
                line=number, collective=self.program, ranks=None, nccl_version=self.version, env=dict(self.env)
            )
            self.runs.append(self.run)
        return self.run

    def read_line(self, number: int, raw: str) -> None:
        prefix = _PREFIX.match(raw)
        process = stated_count(prefix.group(1)) if prefix and prefix.group(1) is not None else None
        line = raw[prefix.end() :].rstrip() if prefix else raw.rstrip()
        body = line.strip()
        self._note_names(body)
        if match := _RUN_LINE.match(body):
            self._start_run(number, match)
        elif match := _RANK_LINE.match(body):
            run = self.current_run(number)
            run.hosts.append(match.group(1))
            run.devices.append(match.group(2).strip())
        elif (cols := _header_columns(body)) is not None:
            self._start_table(number, cols)
        elif body.startswith("#") or _FOOTER.match(body):
            self._read_comment(body)
        elif self.in_table and self.columns is not None:
            self._read_table_line(number, body, process)
        elif _ROW_START.match(body) and len(body.split()) >= 9:
            self.warnings.append(
                f"{self.path}:{number}: looks like a result row but no table header precedes it: {body[:80]}"
            )

    def _note_names(self, body: str) -> None:
        """The NCCL version and the *_perf program a line states, remembered for the runs that follow."""
        if match := _TESTS_VERSION.match(body) or _NCCL_VERSION.search(body):
            text_version = match.group(1)
            self.version = (
                _nccl_version_from_code(stated_count(text_version)) if text_version.isdigit() else text_version
            )
            if self.run is not None and not self.run.rows:  # NCCL prints its version while the run initializes
                self.run.nccl_version = self.version
        program_match = PROGRAM.search(body)
        if program_match and not _ROW_START.match(body):
            self.program = program_match.group(1)
        if program_match or re.match(r"(?:[$#]\s*)?export\s", body):
            self.env.update(_ENV_ASSIGN.findall(body))
        elif (info := _ENV_INFO.search(body)) and self.run is not None and not self.run.rows:
            self.run.env[info.group(1)] = info.group(2)

    def _start_run(self, number: int, match: re.Match[str]) -> None:
        run = Run(
            line=number,
            collective=self.program,
            ranks=None,
            nthread=stated_count(match.group(1)),
            ngpus=stated_count(match.group(2)),
            nccl_version=self.version,
            env=dict(self.env),
        )
        self.runs.append(run)
        self.run = run
        rest = match.group(3)
        if m := re.search(r"graph:\s*(\d+)", rest):
            run.graph = stated_count(m.group(1)) > 0
        if m := re.search(r"warmup iters:\s*(\d+)", rest):
            run.warmup = stated_count(m.group(1))
        if m := re.search(r"(?<!warmup )iters:\s*(\d+)", rest):
            run.iterations = stated_count(m.group(1))
        self.columns, self.in_table = None, False

    def _start_table(self, number: int, columns: list[str]) -> None:
        self.columns, self.in_table = columns, True
        run = self.current_run(number)
        if run.rows:  # a second table under one run header: a new run of the same binary
            self.run = replace(
                run,
                line=number,
                rows=[],
                devices=list(run.devices),
                hosts=list(run.hosts),
                avg_busbw_gbps=None,
                out_of_bounds=None,
            )
            self.runs.append(self.run)

    def _read_comment(self, body: str) -> None:
        if self.run is None:
            return
        if m := re.match(r"#?\s*Avg bus bandwidth\s*:\s*(\S+)", body):
            self.run.avg_busbw_gbps = optional_float(m.group(1))
            self.in_table = False
        elif m := re.match(r"#?\s*Out of bounds values\s*:\s*(\d+)", body):
            self.run.out_of_bounds = stated_count(m.group(1))

    def _read_table_line(self, number: int, body: str, process: int | None) -> None:
        if not body or body.startswith("```"):
            self.in_table = False
            return
        try:
            row = _parse_row(body, number, self.columns or [])
        except RefusedRow as exc:  # an edited or corrupt log: none of its numbers can be trusted
            raise UsageError(f"{self.path}:{number}: {exc}, which no measurement gives") from None
        except ValueError as exc:
            self.warnings.append(f"{self.path}:{number}: unreadable table line ({exc}): {body[:80]}")
        else:
            row.process = process
            assert self.run is not None  # a table header always opens a run
            self.run.rows.append(row)

    def finish(self) -> ParsedLog:
        path, warnings = self.path, self.warnings
        runs = [piece for r in self.runs if r.rows for piece in _split_interleaved(r, path, warnings)]
        if not runs:
            raise UsageError(f"{path}: no nccl-tests result table found")
        for r in runs:
            # "Using devices" lists every rank (MPI gathers them to the root); nThread x nGpus is per process.
            if r.ranks is None and r.devices:
                r.ranks = len(r.devices)
            elif r.ranks is None and r.ngpus:
                r.ranks = (r.nthread or 1) * r.ngpus
            if r.ranks is None:
                warnings.append(
                    f"{path}:{r.line}: GPU count not stated (no '# nThread ... nGpus' or 'Using devices' "
                    "lines); ranks left unknown"
                )
            if r.collective is None:
                warnings.append(f"{path}:{r.line}: the *_perf binary is not named in the file; assumed all_reduce")
                r.collective = "all_reduce"
            if problem := header_problem(r):
                raise UsageError(f"{path}:{r.line}: {problem}, which no nccl-tests run has")
        return ParsedLog(path=path, runs=runs, warnings=warnings)


def _split_interleaved(run: Run, path: str, warnings: list[str]) -> list[Run]:
    """One run per MPI process when several processes printed their rows into one table.

    nccl-tests prints from one process only when built with MPI=1; mpirun of a build without it starts
    independent tests whose lines interleave, each size appearing once per process. With `--tag-output`
    the tags say whose row is whose; without, the k-th row of a size is the k-th process's.
    """
    tags = sorted({row.process for row in run.rows if row.process is not None})
    repeats = any(b.bytes <= a.bytes for a, b in zip(run.rows, run.rows[1:]))
    if len(tags) < 2 and not repeats:
        return [run]
    if len(tags) >= 2:
        index = {tag: i for i, tag in enumerate(tags)}
        owners = [index[row.process] if row.process is not None else 0 for row in run.rows]
        how = "by their --tag-output ranks"
    else:
        seen: dict[int, int] = {}
        owners = []
        for row in run.rows:
            owners.append(seen.get(row.bytes, 0))
            seen[row.bytes] = owners[-1] + 1
        how = "in order of appearance (no --tag-output tags)"
    count = max(owners) + 1
    per_process = (run.nthread or 1) * (run.ngpus or 1)
    warnings.append(
        f"{path}:{run.line}: rows of {count} processes interleaved in one table (each printed its own test: "
        f"nccl-tests built without MPI=1 under mpirun?); split {how} into {count} runs of {per_process} rank(s) each"
    )
    rows: list[list] = [[] for _ in range(count)]
    for row, who in zip(run.rows, owners):  # one pass: a table of 20,000 rows may hold 20,000 processes
        rows[who].append(row)
    pieces = []
    for owner in range(count):
        devices = [run.devices[owner]] if len(run.devices) == count else list(run.devices)
        hosts = [run.hosts[owner]] if len(run.hosts) == count else list(run.hosts)
        pieces.append(replace(run, rows=rows[owner], devices=devices, hosts=hosts, ranks=per_process))
    return pieces
