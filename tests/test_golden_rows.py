"""Golden output (a complement to the theory tests, never the proof): fixed-seed scenarios must
give exactly the stored rows, so an optimisation that changes any result is caught."""

from __future__ import annotations

import json

import pytest
from golden_cases import CASES, golden_path, stable_rows


@pytest.mark.parametrize("case", sorted(CASES))
def test_rows_identical_to_the_stored_golden_output(case):
    expected = json.loads(golden_path(case).read_text())
    actual = json.loads(json.dumps(stable_rows(case), sort_keys=True))
    assert actual == expected
