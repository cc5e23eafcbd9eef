"""treadle — a durable agent runtime whose state is the run's transcript in Postgres."""

__version__ = "0.1.0"
