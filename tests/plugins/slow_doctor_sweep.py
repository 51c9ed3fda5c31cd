"""The sweep's entry point with rank 0's doctor slower than the controllers' group timeout: the group's slack is
taken away (its timeout is then the sweep file's point_timeout_s) and the doctor sleeps DOCTOR_S before its
verdicts, as a doctor whose GPU tests wait out their limits on a box whose NCCL hangs (210 s and more)."""

import os
import signal
import sys
import time

from commprof.sweep.command import main, terminate_as_interrupt
from commprof.sweep.running import run_folder, runner


def slow_doctor(quick=True, floor=None):
    time.sleep(float(os.environ["SLOW_DOCTOR_S"]))
    return []


if __name__ == "__main__":
    runner.AGREEMENT_SLACK_S = 0.0
    run_folder.run_doctor = slow_doctor
    signal.signal(signal.SIGTERM, terminate_as_interrupt)
    sys.exit(main())
