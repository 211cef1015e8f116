"""A round's oracle and spare runners, started on a thread of their own while the driver goes on.

Starting them is the oracle importing torch and the reference and making its CUDA context (about 3.5 s before it
answered on an H200, 2026-11-29), and the spares' template importing torch before it forks. None of it needs the
driver, and the driver has its own waits then: the device probe (a child that imports torch, 4-6 s), the base's
compile, the candidates' patches. A round on one GPU waited for each in turn: 10-12 s of pmpp/matmul_py's and
prefixsum_py's rounds passed before the base's compile began, and their base's check then waited another 4.7-6.1 s
for a spare (docs/judge_performance.md).

Where the evaluator is used before its start has ended, `ready` waits for it; a start that failed is met again, and
recorded, by the stage that needs the oracle (the same as a start in the driver's own thread). The thread lives until
`end`: every process judge starts dies with the thread that started it (PR_SET_PDEATHSIG, judge.sandbox.child), so
the oracle and the spares' template would die with a thread that ended after starting them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stages.evaluation import Evaluator


class WarmStart:
    """An evaluator whose `start` (oracle, spares) runs on a thread; `ready` hands it over once that has ended, and
    `end`, once the evaluator is closed, lets the thread go."""

    def __init__(self, evaluator: "Evaluator"):
        self.evaluator = evaluator
        self._started, self._ended = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._start, name="judge-warm", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self.evaluator.start()
        except Exception:  # noqa: BLE001 - the stage that needs the oracle meets it again and says so
            pass
        finally:
            self._started.set()
        self._ended.wait()  # what it started lives as long as this thread does

    def ready(self) -> "Evaluator":
        """The evaluator, once its start has ended (at once where it has)."""
        self._started.wait()
        return self.evaluator

    def end(self) -> None:
        """Let the thread go: only once the evaluator is closed (its processes would be killed with the thread)."""
        self._ended.set()
        self._thread.join()
