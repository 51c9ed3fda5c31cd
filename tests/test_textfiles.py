"""Files a user names are read with limits: a FIFO, /dev/zero, a huge number or deep nesting is one clear line."""

import gzip
import os
import re
import threading
from pathlib import Path

import pytest

from commprof.cli import main
from commprof.errors import UsageError
from commprof.textfiles import read_json, read_text


def one_line_error(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(match, err), err


def test_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    done = threading.Event()

    def unblock():  # were the reader to block, a writer opening the FIFO would release it: the test then fails
        if not done.wait(20):
            with open(fifo, "w"):
                pass

    threading.Thread(target=unblock, daemon=True).start()
    try:
        one_line_error(capsys, ["plan", "--model", str(fifo), "--tp", "2", "--tokens", "1"], "not a regular file")
    finally:
        done.set()


def test_dev_zero_is_refused_without_reading_it(capsys):
    one_line_error(capsys, ["plan", "--model", "/dev/zero", "--tp", "2", "--tokens", "1"], "not a regular file")


def test_a_file_above_the_limit_is_refused(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(" " * 2048)
    with pytest.raises(UsageError, match="2048 bytes, more than the 1024 a model config may have"):
        read_text(path, "model config", limit=1024)


@pytest.mark.parametrize(
    "text,match",
    [
        ('{"num_hidden_layers": ' + "9" * 5000 + "}", r"not usable JSON \(Exceeds the limit"),
        ("[" * 100_000 + "]" * 100_000, r"not usable JSON \(maximum recursion depth"),
        ('{"a": 1,', r"not valid JSON"),
    ],
    ids=["5000-digit number", "deep nesting", "truncated"],
)
def test_json_that_python_cannot_take_is_one_line(tmp_path, capsys, text, match):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=match):
        read_json(path, "model config")
    one_line_error(capsys, ["plan", "--model", str(path), "--tp", "2", "--tokens", "1"], match)


def test_a_sweep_file_with_a_huge_number_or_a_nul_in_its_name(tmp_path, capsys):
    sweep = tmp_path / "s.toml"
    sweep.write_text("[run]\niterations = " + "9" * 5000 + "\n")
    one_line_error(capsys, ["simulate", "--topology", "pcie-4gpu", "--sweep", str(sweep)], "not usable TOML")
    sweep.write_text('name = "a\\u0000b"\n[run]\nmodel = "llama-3.1-70b"\ntokens = [1]\n')
    out = tmp_path / "runs"
    assert main(["simulate", "--topology", "pcie-4gpu", "--sweep", str(sweep), "--out", str(out)]) == 0
    (run_dir,) = out.iterdir()
    assert run_dir.name.endswith("-a-b-sim-pcie-4gpu")


def test_report_accept_beyond_any_verify_step_is_one_line(capsys):
    gloo_run = Path(__file__).parent / "fixtures" / "report" / "cpu-smoke-gloo"
    one_line_error(capsys, ["report", str(gloo_run), "--accept", "1e308"], "above 1024")


def test_trace_files_are_read_with_the_same_limits(tmp_path, capsys, monkeypatch):
    one_line_error(capsys, ["trace", "/dev/zero"], r"trace /dev/zero: not a regular file")
    deep = tmp_path / "rank0.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(capsys, ["trace", str(deep)], r"not usable JSON \(maximum recursion depth")
    bomb = tmp_path / "rank1.json.gz"
    limit = 1 << 20  # the reader's cap (LOG_BYTES, 512 MiB) made small: the same bounded read, not 512 MiB zipped
    monkeypatch.setattr("commprof.trace.events.LOG_BYTES", limit)
    bomb.write_bytes(gzip.compress(b" " * (limit + 1)))
    one_line_error(capsys, ["trace", str(bomb)], f"unzips to more than the {limit} bytes")
    fifo = tmp_path / "host-pid1.log"
    os.mkfifo(fifo)
    one_line_error(capsys, ["trace", str(fifo)], "NCCL Inspector dump .*: not a regular file")


def test_a_toml_file_saved_with_a_byte_order_mark_reads_as_without_it():
    from commprof.textfiles import parse_toml

    assert parse_toml('\ufeffname = "x"\n[run]\ntokens = [1]\n', "bom.toml") == {"name": "x", "run": {"tokens": [1]}}
