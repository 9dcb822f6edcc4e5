"""`python -m sweep [overrides]`: see `sweep.cli`. Ctrl-C or SIGTERM at any moment ends it with exit
code 130 (a sweep first stores what finished and stops what it started)."""

import os
import sys

from .interrupts import EXIT_INTERRUPTED, sigterm_as_interrupt

try:
    with sigterm_as_interrupt():
        from .cli import main  # after SIGTERM is taken over: importing Hydra and the engine takes a while

        main()
except KeyboardInterrupt:  # before a sweep could say so itself: while Hydra composes, or planning
    print("interrupted", file=sys.stderr)
except SystemExit as exiting:
    if exiting.code != EXIT_INTERRUPTED:
        raise
else:
    sys.exit(0)
# Interrupted, and what finished is stored and Ray stopped by now. Exit without the C++ exit handlers
# of Ray's core worker: after a start cut short by a second Ctrl-C they wait 4 s and may crash.
sys.stdout.flush()
sys.stderr.flush()
os._exit(EXIT_INTERRUPTED)
