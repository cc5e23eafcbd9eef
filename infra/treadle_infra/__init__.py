"""The CDK app of treadle's cloud shape: the `TreadleRuntime` construct and `TreadleStack`."""

from treadle_infra.runtime import TreadleRuntime, TreadleRuntimeProps
from treadle_infra.stack import TreadleStack

__all__ = ["TreadleRuntime", "TreadleRuntimeProps", "TreadleStack"]
