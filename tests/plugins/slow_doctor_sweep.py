"""The sweep's entry point with rank 0's doctor slower than the controllers' group timeout: the group's slack is
taken away (its timeout is then the sweep file's point_timeout_s) and the doctor sleeps DOCTOR_S before its
verdicts, as a doctor whose GPU tests wait out their limits on a box whose NCCL hangs (210 s and more).

The two are set once the rank's fork server has started, as the real entry point starts it: before anything here
loads torch (the runner does), so the server is forked rather than a clean interpreter importing torch again."""

import os
import signal
import sys
import time

from commprof.replay.forkserver import ForkServer
from commprof.sweep.command import main, terminate_as_interrupt


def slow_doctor(quick=True, floor=None):
    time.sleep(float(os.environ["SLOW_DOCTOR_S"]))
    return []


def start_then_slow_the_doctor(cls, real=ForkServer.start.__func__):
    server = real(cls)
    from commprof.sweep.running import run_folder, runner

    runner.AGREEMENT_SLACK_S = 0.0
    run_folder.run_doctor = slow_doctor
    return server


if __name__ == "__main__":
    ForkServer.start = classmethod(start_then_slow_the_doctor)
    signal.signal(signal.SIGTERM, terminate_as_interrupt)
    sys.exit(main())
