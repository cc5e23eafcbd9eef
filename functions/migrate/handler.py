"""Migrate function: treadle's migrations at deploy time (a custom resource) and the operator's doctor."""

from treadle_cloud.migrate import MigrateFunction

handler = MigrateFunction()
