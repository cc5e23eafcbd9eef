"""Migrate function: treadle's migrations at deploy time (a custom resource) and the operator's doctor."""

from functions import initialised
from treadle_cloud.migrate import MigrateFunction

handler = initialised(MigrateFunction())
