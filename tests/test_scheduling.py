"""tests/scheduling.py: the exclusive tests run first, on one worker, with every other worker idle; then the rest,
longest first, whole modules or test by test; no worker is left holding a test it cannot start."""

from __future__ import annotations

import pytest

pytest.importorskip("xdist")

from scheduling import ExclusiveScheduling  # noqa: E402

COLLECTION = [
    "tests/test_a.py::test_one", "tests/test_a.py::test_two",  # 1 s, whole
    "tests/test_timed.py::test_x[p]", "tests/test_timed.py::test_x[q]",  # exclusive module
    "tests/test_split.py::test_s1", "tests/test_split.py::test_s2", "tests/test_split.py::test_s3",  # 9 s, split
    "tests/test_mixed.py::test_round", "tests/test_mixed.py::test_quick",  # one exclusive test, 5 s
]


class Config:
    def getvalue(self, name):
        return ["popen", "popen"] if name == "tx" else None


SENT: list[str] = []  # every test in the order the scheduler handed it out


class Node:
    def __init__(self, name: str):
        self.name, self.shutting_down, self.queue, self.log = name, False, [], []
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices):
        self.queue += [COLLECTION[i] for i in indices]
        SENT.extend(COLLECTION[i] for i in indices)

    def shutdown(self):
        self.shutting_down = True

    def run_one(self, sched: ExclusiveScheduling) -> str | None:
        """What an xdist worker does: run its first test only once it knows the next one, or is told to stop."""
        if len(self.queue) < 2 and not (self.shutting_down and self.queue):
            return None
        nodeid = self.queue.pop(0)
        self.log.append(nodeid)
        sched.mark_test_complete(self, COLLECTION.index(nodeid))
        return nodeid


def run(sched: ExclusiveScheduling, nodes: list[Node]) -> list[tuple[str, str, bool]]:
    """Every test as (worker, test, whether another worker held a startable test then), until nothing can run."""
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    ran = []
    while True:
        progressed = False
        for node in nodes:
            busy_elsewhere = any(len(o.queue) >= 2 or (o.shutting_down and o.queue) for o in nodes if o is not node)
            nodeid = node.run_one(sched)
            if nodeid:
                ran.append((node.name, nodeid, busy_elsewhere))
                progressed = True
        if not progressed:
            return ran


@pytest.fixture
def sched():
    SENT.clear()
    return ExclusiveScheduling(Config(), None, modules={"test_timed.py"}, tests={"test_mixed.py::test_round"},
                               seconds={"test_a.py": 1, "test_split.py": 9, "test_mixed.py": 5},
                               split={"test_split.py"})


def test_exclusive_tests_run_first_on_one_worker_alone_then_the_rest_longest_first(sched):
    nodes = [Node("gw0"), Node("gw1")]
    ran = run(sched, nodes)
    assert sorted(t for _, t, _ in ran) == sorted(COLLECTION)  # every test once, none left waiting
    assert sched.tests_finished and all(n.shutting_down and not n.queue for n in nodes)
    exclusive = ["tests/test_timed.py::test_x[p]", "tests/test_timed.py::test_x[q]", "tests/test_mixed.py::test_round"]
    assert [t for _, t, _ in ran[:3]] == exclusive
    assert {w for w, t, _ in ran if t in exclusive} == {"gw0"}
    assert not any(busy for _, t, busy in ran if t in exclusive)  # no other worker could run a test meanwhile
    # then longest first: test_mixed's other test (5 s), each test of the split module (9 s over 3), test_a (1 s)
    assert SENT[3:] == ["tests/test_mixed.py::test_quick", "tests/test_split.py::test_s1", "tests/test_split.py::test_s2",
                        "tests/test_split.py::test_s3", "tests/test_a.py::test_one", "tests/test_a.py::test_two"]

def test_without_exclusive_tests_single_test_units_never_leave_a_worker_waiting(sched):
    """A worker given one single-test unit would wait for a next test forever: each gets at least two."""
    sched._modules, sched._tests = set(), set()
    nodes = [Node("gw0"), Node("gw1")]
    ran = run(sched, nodes)
    assert sorted(t for _, t, _ in ran) == sorted(COLLECTION)
    assert {w for w, _, _ in ran} == {"gw0", "gw1"}
