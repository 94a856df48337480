"""`make test` skips the tests marked slow, each with its reason; `make test-all` (`--slow`) runs them; a slow mark
without its reason stops the run (tests/conftest.py, `skip_slow`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import skip_slow, skipped


class Item:
    """What `skip_slow` reads of a collected test: its marks and its node id."""

    def __init__(self, nodeid: str, *marks):
        self.nodeid, self.marks = nodeid, list(marks)

    def get_closest_marker(self, name):
        return next((m for m in reversed(self.marks) if m.name == name), None)

    def add_marker(self, mark):
        self.marks.append(mark.mark)


def config(slow: bool):
    return SimpleNamespace(getoption=lambda name: {"--slow": slow}[name])


def test_a_slow_test_is_skipped_with_its_reason_unless_asked_for():
    fast, slow = Item("t.py::fast"), Item("t.py::slow", pytest.mark.slow("runs dvc three times").mark)
    skip_slow(config(False), [fast, slow])
    assert not skipped(fast) and skipped(slow)
    assert slow.get_closest_marker("skip").kwargs["reason"] == "slow: runs dvc three times (`make test-all` runs it)"
    again = Item("t.py::slow", pytest.mark.slow("runs dvc three times").mark)
    skip_slow(config(True), [again])
    assert not skipped(again)


@pytest.mark.parametrize("mark", [pytest.mark.slow, pytest.mark.slow("  ")])
def test_a_slow_mark_without_its_reason_stops_the_run(mark):
    with pytest.raises(pytest.UsageError, match=r"t.py::bare: @pytest.mark.slow needs its reason"):
        skip_slow(config(True), [Item("t.py::bare", mark.mark)])
