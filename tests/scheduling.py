"""How the suite shares a machine's cores (pytest-xdist): test modules spread over one worker per core, except
those that time kernels on this machine's CPU, which run one at a time with every other worker idle.

A CPU target's timed pair is pinned to one core and its oracle and spares to the others (judge.core_blocks); a
test of another module running beside it takes those cores too, and a verdict that must come out `unchanged` or
`slower` could then come out otherwise. So the modules conftest.EXCLUSIVE names (and single tests it names) run
first, all on one worker, while the others wait; then every other module is handed out, longest first (their
seconds from conftest.MODULE_SECONDS), whole, so that a module-scoped fixture (a round, a compiled kernel) is paid
once; the tests of a module in conftest.SPLIT_MODULES, which share nothing costly, go out one by one.

A worker runs a test only once it knows the next one (pytest needs it to tear fixtures down), so the exclusive
worker is given its first other module as its last exclusive test starts, and the other workers start only when
that test has ended.
"""

from __future__ import annotations

from collections import OrderedDict
from xdist.scheduler import LoadScopeScheduling


def module_of(nodeid: str) -> str:
    """`tests/test_x.py::test_f[p]` -> `test_x.py` (relative to tests/), as conftest's tables name modules."""
    path = nodeid.split("::", 1)[0]
    return path.split("tests/", 1)[-1] if path.startswith("tests/") else path


def test_of(nodeid: str) -> str:
    """`tests/test_x.py::test_f[p]` -> `test_x.py::test_f`, as conftest's tables name single tests."""
    module = module_of(nodeid)
    rest = nodeid.split("::", 1)[1] if "::" in nodeid else ""
    return f"{module}::{rest.split('[', 1)[0]}"


class ExclusiveScheduling(LoadScopeScheduling):
    """LoadScopeScheduling by module, with a first phase of exclusive units on one worker (module docstring)."""

    def __init__(self, config, log=None, *, modules: set[str], tests: set[str], seconds: dict[str, float],
                 split: set[str] = frozenset()):
        super().__init__(config, log)
        self._modules, self._tests = modules, tests  # what runs alone: whole modules, single tests (conftest's names)
        self._seconds = seconds  # a module's expected seconds, for longest-first
        self._split = split  # modules handed out test by test
        self.exclusive_queue: OrderedDict[str, dict[str, bool]] = OrderedDict()
        self.exclusive_node = None  # the worker running the exclusive phase, until its last test has ended

    # ---- scopes -------------------------------------------------------------------------------------------

    def _split_scope(self, nodeid: str) -> str:
        """A module; a single exclusive test (all its parameters) of a module that is not exclusive; a single test of
        a split module."""
        if test_of(nodeid) in self._tests:
            return nodeid.split("[", 1)[0]
        if module_of(nodeid) in self._split:
            return nodeid
        return nodeid.split("::", 1)[0]

    def _exclusive(self, nodeid: str) -> bool:
        return module_of(nodeid) in self._modules or test_of(nodeid) in self._tests

    # ---- state --------------------------------------------------------------------------------------------

    @property
    def tests_finished(self) -> bool:
        if self.exclusive_queue or self.exclusive_node is not None:
            return False
        return super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.exclusive_queue) or self.exclusive_node is not None or super().has_pending

    def remove_node(self, node):
        """A worker that died: its unfinished exclusive tests go back to the front of the exclusive queue."""
        if node is self.exclusive_node:
            self.exclusive_node = None
            workload = self.assigned_work.get(node, {})
            for scope in [s for s in workload if self._is_exclusive_scope(s)]:
                unit = workload.pop(scope)
                if not all(unit.values()):
                    self.exclusive_queue[scope] = unit
                    self.exclusive_queue.move_to_end(scope, last=False)
        return super().remove_node(node)

    def _is_exclusive_scope(self, scope: str) -> bool:
        return self._exclusive(next(iter(self._units[scope])))

    # ---- scheduling ---------------------------------------------------------------------------------------

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        self._units: dict[str, list[str]] = {}
        for nodeid in self.collection:
            self._units.setdefault(self._split_scope(nodeid), []).append(nodeid)
        shared = []
        for scope, nodeids in self._units.items():
            unit = {nodeid: False for nodeid in nodeids}
            if self._exclusive(nodeids[0]):
                self.exclusive_queue[scope] = unit
            else:
                shared.append((scope, unit))
        units_of = {}
        for scope, _ in shared:
            units_of[module_of(scope)] = units_of.get(module_of(scope), 0) + 1
        # longest first (a split module's seconds shared among its tests): the shortest make the tail
        shared.sort(key=lambda item: -self._seconds.get(module_of(item[0]), 0) / units_of[module_of(item[0])])
        self.workqueue = OrderedDict(shared)
        if self.exclusive_queue:
            self.exclusive_node = self.nodes[0]
            while self.exclusive_queue:
                self._assign(self.exclusive_node, *self.exclusive_queue.popitem(last=False))
            self._release_last_exclusive(self.exclusive_node)
            return
        for node in self.nodes:
            self._reschedule(node)

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        nodeid = self.registered_collections[node][item_index]
        self.assigned_work[node][self._split_scope(nodeid)][nodeid] = True
        if node is self.exclusive_node:
            if self._exclusive_pending(node) == 0:
                self.exclusive_node = None  # the phase is over: every worker may start
                for other in self.nodes:
                    self._reschedule(other)
            else:
                self._release_last_exclusive(node)
            return
        self._reschedule(node)

    def _exclusive_pending(self, node) -> int:
        return sum(list(unit.values()).count(False) for scope, unit in self.assigned_work[node].items()
                   if self._is_exclusive_scope(scope))

    def _release_last_exclusive(self, node) -> None:
        """The exclusive worker holds its last test until it knows the next: give it its first shared unit (or
        its end) as that test is the only one left."""
        if self._exclusive_pending(node) != 1 or self._pending_of(self.assigned_work[node]) != 1:
            return
        if self.workqueue:
            self._assign(node, *self.workqueue.popitem(last=False))
        else:
            node.shutdown()

    def _reschedule(self, node) -> None:
        if node.shutting_down or self.exclusive_node is not None:
            return
        if not self.workqueue:
            node.shutdown()
            return
        # at least two tests pending, as in LoadScopeScheduling: a worker holds its last test until it knows the next
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            self._assign(node, *self.workqueue.popitem(last=False))

    def _assign(self, node, scope: str, unit: dict[str, bool]) -> None:
        self.assigned_work.setdefault(node, {})[scope] = unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid) for nodeid, done in unit.items() if not done])


