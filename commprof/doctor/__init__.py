"""`commprof doctor`: a pre-flight check of a multi-GPU box before anyone trusts a number (docs/doctor.md)."""

from commprof.doctor.result import CheckResult
from commprof.doctor.runner import doctor_summary, has_failures, run_doctor

__all__ = ["CheckResult", "doctor_summary", "has_failures", "run_doctor"]
