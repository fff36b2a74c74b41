"""The fork servers a process keeps (autograder/server_pool.py): a server outlives the thread that
asked for it, serves the process's later runs, and is stopped when idle too long or when the
memory would not hold it."""

import os
import threading

import pytest
from harness import ROOT

import autograder.server_pool as server_pool
from autograder.course import lessons
from autograder.jobs import lesson_isolations
from autograder.protocol import Limits, Step
from autograder.runner import run_steps
from autograder.sandbox import isolation, resolve_mode

pytestmark = pytest.mark.slow
LIMITS = Limits(wall_s=60, cell_s=30)


@pytest.fixture
def started(monkeypatch):
    """The servers this test starts (none kept from an earlier test)."""
    server_pool.shutdown()
    count = []
    original = server_pool.ForkServer.__init__

    def counted(self, iso, env=None):
        original(self, iso, env)
        count.append(self)

    monkeypatch.setattr(server_pool.ForkServer, "__init__", counted)
    yield count
    server_pool.shutdown()


def _job(iso, name):
    job = run_steps([Step("code", name, f"{name} = 1")], LIMITS, iso)
    assert job.step(name) is not None and job.step(name).status == "ok", job.lines
    return job


def test_a_server_asked_for_by_a_thread_that_ended_serves_the_next_run(started):
    """A sandboxed server dies with the thread that started it (bubblewrap's --die-with-parent):
    the pool's own thread starts every server, so a grading thread may end and its server lives on."""
    iso = isolation(resolve_mode("auto"), ROOT, [], [])
    thread = threading.Thread(target=_job, args=(iso, "a"))
    thread.start()
    thread.join()
    assert len(started) == 1 and started[0].alive()
    assert server_pool.idle_count(iso) == 1
    _job(iso, "b")
    assert len(started) == 1, "the second job started a server of its own"
    assert started[0].alive()


def test_idle_servers_beyond_the_memorys_means_or_waiting_too_long_are_stopped(started, monkeypatch):
    iso = isolation("none", ROOT, [], [])
    _job(iso, "a")
    server_pool.stop_idle(3600)
    assert server_pool.idle_count(iso) == 1, "a server idle for less than the limit is kept"
    server_pool.stop_idle(0)
    assert server_pool.idle_count(iso) == 0 and not started[0].alive()
    assert not os.path.exists(started[0].job_base), "its job folder goes with it"

    assert 1 <= server_pool.keep_limit() <= server_pool.MAX_KEPT
    _job(iso, "b")
    monkeypatch.setattr(server_pool, "keep_limit", lambda: 0)
    server_pool.run_ended()
    assert server_pool.idle_count(iso) == 0 and not started[1].alive()


def test_servers_of_a_tagged_owner_serve_no_one_else(started):
    """A Dask worker tags its isolations to stop its own servers when the course changes: another
    owner's job never takes one of them (it could be stopped under that job)."""
    course = lessons(ROOT)
    first = lesson_isolations("none", ROOT, course, course[:1], [], tag="one")[course[0].assignment]
    second = lesson_isolations("none", ROOT, course, course[:1], [], tag="two")[course[0].assignment]
    shared = lesson_isolations("none", ROOT, course, course[:1], [])[course[0].assignment]
    assert first.prefix == second.prefix == shared.prefix
    _job(first, "a")
    _job(second, "b")
    _job(shared, "c")
    assert len(started) == 3
    server_pool.shutdown_servers(first.key)
    assert not started[0].alive() and started[1].alive() and started[2].alive()
