"""Lambda entry points of the cloud shape: `functions.<name>.handler.handler` (see treadle_cloud).

A cold start imports a few hundred modules; the cyclic garbage collector, triggered by the
allocation count, walks the growing heap over and over meanwhile, finding nothing to free (module
objects live as long as the execution environment). So importing this package pauses it, and each
handler module's `handler = initialised(...)` ends the pause: the objects made so far are frozen —
moved out of the collector's sight for good (`gc.freeze`), so no later collection walks them
either — and the collector runs again for the invocations' garbage. `scripts/coldstart_ratios.py` measures the
saving, and gives the dependencies-alone floor the same treatment (the ratio compares like with like).
"""

import gc
from typing import TypeVar

gc.disable()

T = TypeVar("T")


def initialised(handler: T) -> T:
    """The handler's INIT is done: freeze what it made, and collect the invocations' garbage again."""
    gc.freeze()
    gc.enable()
    return handler
