"""Maintenance function: every minute, re-enqueue expired leases and due steps."""

from functions import initialised
from treadle_cloud.maintenance import MaintenanceFunction

handler = initialised(MaintenanceFunction())
