"""Scheduler function: the EventBridge Scheduler target that fires a schedule by id."""

from functions import initialised
from treadle_cloud.scheduler import SchedulerFunction

handler = initialised(SchedulerFunction())
