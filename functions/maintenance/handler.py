"""Maintenance function: every minute, re-enqueue expired leases and due steps."""

from treadle_cloud.maintenance import MaintenanceFunction

handler = MaintenanceFunction()
