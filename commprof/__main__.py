"""`python -m commprof`."""

import sys

from commprof.cli import main

sys.exit(main())
