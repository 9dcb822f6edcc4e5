"""`python -m sweep.report results/<name>`."""

import sys

from .build import main

sys.exit(main())
