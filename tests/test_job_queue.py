"""The local threads' job order (autograder/job_queue.py): as few fork servers as will do."""

import threading
import time

from autograder.job_queue import SPARE_SERVER_JOBS, JobQueue


def _run(jobs, threads=2, seconds=0.01):
    """Real threads taking from the queue; returns (the jobs each thread ran, the servers per group)."""
    order = JobQueue(jobs, key=lambda job: job[0])
    ran = {n: [] for n in range(threads)}

    def work(n):
        while (job := order.take()) is not None:
            ran[n].append(job)
            time.sleep(seconds)
            order.done(job)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(10)
    assert not any(w.is_alive() for w in workers), "a thread is still waiting"
    return ran, order.servers()


def test_a_class_of_many_lessons_gets_one_server_per_lesson():
    jobs = [(lesson, student) for lesson in "ABCDEF" for student in range(3)]  # 3 notebooks each: too few for two
    ran, servers = _run(jobs)
    assert sorted(job for done in ran.values() for job in done) == sorted(jobs), "every job once"
    assert servers == dict.fromkeys("ABCDEF", 1)
    assert all(ran.values()), "both threads worked"


def test_a_big_lesson_gets_a_server_per_thread():
    jobs = [("A", student) for student in range(4 * SPARE_SERVER_JOBS)]
    ran, servers = _run(jobs)
    assert servers == {"A": 2} and all(ran.values())


def test_a_small_lesson_alone_runs_on_one_server():
    jobs = [("A", student) for student in range(SPARE_SERVER_JOBS - 1)]
    ran, servers = _run(jobs)
    assert servers == {"A": 1} and sorted(sum(ran.values(), [])) == jobs


def test_a_job_that_needs_no_server_is_taken_at_once():
    order = JobQueue([("A", 1), ("A", 2), (None, 3), ("A", 4)], key=lambda job: job[0])
    assert order.take() == (None, 3), "nothing handed in: graded without a server, before anything else"
    assert order.take() == ("A", 1)
    order.done((None, 3))
    assert order.servers() == {"A": 1}


def test_a_waiting_thread_gets_the_server_when_it_is_free_and_stop_ends_the_wait():
    order = JobQueue([("A", 1), ("A", 2), ("A", 3)], key=lambda job: job[0])
    first = order.take()
    got = []
    waiter = threading.Thread(target=lambda: got.append(order.take()))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive() and not got, "it waits for the busy server instead of starting another"
    order.done(first)
    waiter.join(5)
    assert got == [("A", 2)]
    second = threading.Thread(target=lambda: got.append(order.take()))
    second.start()
    time.sleep(0.05)
    order.stop()
    second.join(5)
    assert got == [("A", 2), None] and order.servers() == {"A": 1}


def test_a_lesson_with_a_server_left_by_an_earlier_run_goes_first():
    """Servers idle before the run (the limits' measurement, an earlier class) are the lesson's own:
    its jobs are taken while another lesson's first server would have to start."""
    order = JobQueue([("A", 1), ("B", 1), ("B", 2)], key=lambda job: job[0], servers={"B": 1})
    assert order.take() == ("B", 1)
    assert order.take() == ("A", 1), "B's one server is busy: A starts its own"
    assert order.servers() == {"A": 1, "B": 1}
