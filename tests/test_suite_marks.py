"""`make test` skips the tests marked slow, each with its reason; `make test-all` (`--slow`) runs them; a slow mark
without its reason stops the run (tests/conftest.py, `skip_slow`). A test of a background build is timed without
its wait for the build, which has a limit of its own."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from tests.conftest import BUILD_LIMIT_S, result_of, skip_slow, skipped, timed_without_the_wait


class Item:
    """What `skip_slow` reads of a collected test: its marks and its node id."""

    def __init__(self, nodeid: str, *marks):
        self.nodeid, self.marks = nodeid, list(marks)

    def get_closest_marker(self, name):
        return next((m for m in reversed(self.marks) if m.name == name), None)

    def add_marker(self, mark):
        self.marks.append(mark.mark)


def config(slow: bool, release: bool = False):
    return SimpleNamespace(getoption=lambda name, default=None: {"--slow": slow, "--release": release}[name])


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


def test_a_release_check_is_skipped_by_make_test_and_run_by_make_release_check():
    check = Item("t.py::fresh", pytest.mark.release("re-records the reference run").mark)
    skip_slow(config(True), [check])
    assert check.get_closest_marker("skip").kwargs["reason"] == ("release: re-records the reference run"
                                                                 " (`make release-check` runs it)")
    again = Item("t.py::fresh", pytest.mark.release("re-records the reference run").mark)
    skip_slow(config(False, release=True), [again])
    assert not skipped(again)


class Node:
    """A collected test as pytest keeps its own marks: the first is the closest; `append=False` puts one first."""

    def __init__(self, *marks):
        self.own_markers = list(marks)

    def get_closest_marker(self, name):
        return next((m for m in self.own_markers if m.name == name), None)

    def add_marker(self, mark, append=True):
        self.own_markers.insert(len(self.own_markers) if append else 0, mark.mark)


@pytest.mark.parametrize(("own", "seconds"), [((), None), ((pytest.mark.timeout(900).mark,), 900)])
def test_a_test_of_a_background_build_is_timed_without_its_wait_for_the_build(own, seconds):
    """Its own limit (or the suite's: None) on the test function only, not on the setup that waits for the build."""
    item = Node(*own)
    timed_without_the_wait(item)
    mark = item.get_closest_marker("timeout")
    assert mark.args == (seconds,) and mark.kwargs == {"func_only": True}


def test_the_wait_for_a_background_build_has_its_own_limit(tmp_path):
    folder = tmp_path / "build-smoke_built"
    folder.mkdir()
    late = time.time() - BUILD_LIMIT_S - 1
    os.utime(folder, (late, late))
    with pytest.raises(pytest.fail.Exception, match=f"has not finished {BUILD_LIMIT_S // 60} min after it started"):
        result_of(folder)
