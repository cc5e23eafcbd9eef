"""Lambda entry points of the cloud shape: `functions.<name>.handler.handler` (see treadle_cloud)."""
