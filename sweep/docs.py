"""`python -m sweep.docs`: print the folder of netsweep's documentation, one Markdown page per subject.

The pages are docs/ of the repository; they ship inside the package as `sweep/manual` (in a checkout a
link to docs/, in a wheel a copy), so whoever installed the wheel has them too:
`ls "$(python -m sweep.docs)"`, starting with its README.md, the list of pages.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def docs_dir() -> Path:
    """The folder of the installed documentation pages, as an absolute path."""
    return Path(str(files("sweep") / "manual")).resolve()


if __name__ == "__main__":
    print(docs_dir())
