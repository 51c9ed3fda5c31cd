"""`torchrun --nproc-per-node N -m commprof.allreduce_sweep`: the documented way to run a sweep.

The command itself lives beside its stage, in commprof/sweep/command.py.
"""

import signal
import sys

from commprof.sweep.command import main, terminate_as_interrupt

__all__ = ["main"]

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, terminate_as_interrupt)
    sys.exit(main())
