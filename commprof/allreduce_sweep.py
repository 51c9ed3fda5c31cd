"""`torchrun --nproc-per-node N -m commprof.allreduce_sweep`: the documented way to run a sweep.

The command itself lives beside its stage, in commprof/sweep/command.py.
"""

import sys

from commprof.sweep.command import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
