"""Every report tfcheck is proven on matches its stored snapshot (see tests/support/snapshot.py)."""
import importlib.util

import pytest

from snapshot import assert_same, subjects

SUBJECTS = subjects()


@pytest.mark.parametrize("name", SUBJECTS)
def test_report_matches_its_snapshot(name):
    if name.startswith("family-"):
        from families import FAMILIES

        needs = FAMILIES[name.removeprefix("family-")].needs
        if needs and importlib.util.find_spec(needs) is None:
            pytest.skip(f"{needs} is not installed (pip install -e '.[test]')")
    assert_same(name, SUBJECTS[name]())
