"""`python -m sweep [overrides]`: see `sweep.cli`."""

from .cli import main

main()
