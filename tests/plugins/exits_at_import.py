"""A plug-in module whose import ends the process: the way it ends is chosen by COMMPROF_TEST_EXIT."""

import faulthandler
import os
import sys
import time

how = os.environ.get("COMMPROF_TEST_EXIT", "exit")
if how == "exit":
    sys.exit(3)
elif how == "abort":
    faulthandler.disable()  # the child inherits pytest's handler, which would print "Fatal Python error: Aborted"
    os.abort()
elif how == "_exit":
    os._exit(0)
elif how == "hang":
    time.sleep(3600)
