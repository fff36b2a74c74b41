"""The thread count helpers chooses on import (helpers.threads): pure rules on given readings."""

from __future__ import annotations

import pytest

from helpers.threads import (
    THREADS_ENV_VAR,
    busy_cpus,
    cgroup_cpu_limit,
    choose_threads,
    usable_cpus,
)


@pytest.mark.parametrize(
    "affinity,quota,load,expected",
    [
        (2, None, 0.1, 2),  # an idle 2-core machine: both cores
        (2, None, 1.0, 1),  # one core already busy
        (2, None, 7.5, 1),  # a busy shared node: one thread, never zero
        (16, 2.5, 0.0, 2),  # a pod that sees 16 cores with a quota of 2.5 CPUs
        (4, None, None, 4),  # no reading of the load: the usable CPUs
        (8, 0.5, 0.0, 1),  # a quota below one CPU
        (4, None, 1.4, 3),  # rounded to the nearest whole free CPU
    ],
)
def test_the_count_fits_the_cpus_the_quota_and_the_load(affinity, quota, load, expected):
    assert choose_threads(affinity, quota, load, environ={}).threads == expected


def test_the_environment_variable_wins_and_is_checked():
    assert choose_threads(2, None, 9.0, environ={THREADS_ENV_VAR: "3"}).threads == 3
    assert "from " + THREADS_ENV_VAR in choose_threads(2, None, 9.0, environ={THREADS_ENV_VAR: "3"}).line()
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match=THREADS_ENV_VAR):
            choose_threads(2, None, 0.0, environ={THREADS_ENV_VAR: bad})


def test_the_line_says_what_was_read_and_how_to_override():
    line = choose_threads(2, None, 1.6, environ={}).line()
    assert line.startswith("torch threads: 1 ") and "2 CPUs usable" in line and THREADS_ENV_VAR in line
    assert "\n" not in line


def test_usable_cpus_never_below_one():
    assert usable_cpus(1, 0.1) == 1 and usable_cpus(8, 3.9) == 3 and usable_cpus(2, None) == 2


def test_cgroup_quotas_are_read_from_v2_and_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_limit(tmp_path) is None
    assert cgroup_cpu_limit(tmp_path / "nowhere") is None


def test_busy_cpus_is_unknown_without_a_readable_stat(tmp_path):
    assert busy_cpus(0.01, tmp_path / "stat") is None
    (tmp_path / "stat").write_text("not a stat file\n")
    assert busy_cpus(0.01, tmp_path / "stat") is None
