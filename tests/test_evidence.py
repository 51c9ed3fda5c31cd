"""The evidence vocabulary: every record source has a level, and each level's rule decides what counts."""

import pytest

from commprof.evidence import IMPORTED, LEVEL_OF_SOURCE, MEASURED, SIMULATED, Evidence, ModelError
from commprof.records.run_meta import parse_meta
from commprof.records.schema import SOURCES


def test_every_record_source_has_an_evidence_level():
    assert set(LEVEL_OF_SOURCE) == set(SOURCES)
    assert {LEVEL_OF_SOURCE[s] for s in SOURCES} == {MEASURED, SIMULATED, IMPORTED}


def test_measured_counts_beyond_noise_and_simulated_beyond_the_models_error():
    measured = Evidence(MEASURED, backend="gloo")
    assert measured.beats(90, 99, 100) and not measured.beats(90, 101, 100)
    prior = Evidence(SIMULATED, calibration="nccl-prior", model_error=ModelError(41.0, "real logs"))
    # 30 % faster with CV 0: beyond noise, but inside the prior's 41 % error, so not a result.
    assert not prior.beats(70, 70, 100) and prior.beats(50, 50, 100)
    assert prior.uncalibrated and prior.label == "simulated with nccl-prior (expected error ±41 %)"
    unknown = Evidence(SIMULATED, calibration="mine.toml", model_error=ModelError(None, "no held-out error"))
    assert not unknown.beats(1, 1, 100) and unknown.error_terms((1, 1), (100, 100)) is None
    assert measured.beats("x", 1, 100) is None and measured.beats(1, float("nan"), 100) is None


def test_a_simulation_carries_its_expected_error_and_an_older_one_has_none():
    recorded = ModelError(41.0, "real logs")
    assert ModelError.from_meta(parse_meta({"model_error": recorded.to_dict()})) == recorded
    older = ModelError.from_meta(parse_meta({"source": "simulated"}))
    assert older.pct is None and "simulate again" in older.basis
    assert ModelError.from_meta(parse_meta({"model_error": {"basis": "odd"}})) == ModelError(None, "odd")
    with pytest.raises(ValueError, match="model_error: pct: expected a finite number or null, got true/false"):
        parse_meta({"model_error": {"pct": True, "basis": "odd"}})  # a flag is no error figure: refused at read
