"""tfcheck.probe.literal_scale follows a name the scaling statement reads to its assignments: a constant only where
every assignment is literal-only and the same, and never through a parameter, a loop variable or an unpacking."""
from __future__ import annotations

import textwrap

import pytest

from tfcheck.probe.literal_scale import written_constant

SOURCE = textwrap.dedent('''\
    import math
    SCALE = 0.125
    TWICE = 0.5
    TWICE = 0.25


    class Base:
        klass = 0.125

        def __init__(self, d):
            self.a = 1 / math.sqrt(64)
            self.b = d ** -0.5
            self.c = 0.125
            self.e, self.f = 0.125, 0.125

        def use(self, x, scale):
            y = x * self.a  # literal in __init__
            y = x * self.b  # computed in __init__
            y = x * self.c  # a subclass computes it
            y = x * scale  # a parameter
            y = x * SCALE  # module constant
            y = x * TWICE  # two values
            y = x * self.klass  # class attribute
            y = x * self.e  # unpacked
            for s in (1,):
                y = x * s  # loop variable
            return y


    class Child(Base):
        def __init__(self, d):
            super().__init__(d)
            self.c = math.sqrt(d)
    ''')


@pytest.fixture()
def source(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    return str(path)


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if marker in line)


@pytest.mark.parametrize(("marker", "shown", "at"), [
    ("# literal in __init__", "self.a = 1 / math.sqrt(64)", "self.a = 1"),
    ("# module constant", "SCALE = 0.125", "SCALE = 0.125"),
    ("# class attribute", "self.klass = 0.125", "klass = 0.125"),
])
def test_a_name_assigned_literals_only_is_a_constant_at_its_assignment(source, marker, shown, at):
    found = written_constant(source, _line(marker), 0.125)
    assert found is not None and found.shown == shown and found.line == _line(at)


@pytest.mark.parametrize("marker", ["# computed in __init__", "# a subclass computes it", "# a parameter",
                                    "# unpacked", "# two values"])
def test_a_name_computed_passed_in_unpacked_or_assigned_two_values_is_not(source, marker):
    value = 0.25 if marker == "# two values" else 0.125
    assert written_constant(source, _line(marker), value) is None


def test_a_loop_variable_is_not_the_module_constant_of_another_scope(source):
    assert written_constant(source, _line("# loop variable"), 1.0) is None
