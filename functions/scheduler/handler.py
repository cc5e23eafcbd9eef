"""Scheduler function: the EventBridge Scheduler target that fires a schedule by id."""

from treadle_cloud.scheduler import SchedulerFunction

handler = SchedulerFunction()
