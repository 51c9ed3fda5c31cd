"""What a sweep keeps of a point's NCCL INFO log: the parsed choices for the step's own sizes."""

from pathlib import Path

from commprof.sweep.measure import summarize_nccl_log

FIXTURE = Path(__file__).parent / "fixtures" / "nccl_log" / "nccl-2.27-8gpu-pcie.log"


def test_point_log_is_parsed_for_the_steps_sizes(tmp_path):
    log = tmp_path / "nccl-tuning.rank0.log"
    text = FIXTURE.read_text()
    tuning = [line for line in text.splitlines() if " Bytes -> Algo " in line and not line.startswith("#")]
    assert tuning, "fixture has tuning lines"
    # The probe repeats each op's tuning line once per step; a choice is kept once.
    log.write_text(text + "\n" + "\n".join(tuning * 3) + "\n")
    sizes = {int(line.split(": ")[1].split(" Bytes")[0]) for line in tuning}
    summary = summarize_nccl_log(log, {min(sizes)})
    assert summary["version"].startswith("2.27.3")
    assert summary["choices"] and {c["bytes"] for c in summary["choices"]} == {min(sizes)}
    keys = [(c["coll"], c["bytes"], c["algo"], c["proto"], c["channels"]) for c in summary["choices"]]
    assert len(keys) == len(set(keys))


def test_missing_log_means_no_summary(tmp_path):
    assert summarize_nccl_log(tmp_path / "absent.log", set()) is None
