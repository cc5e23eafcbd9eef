"""Scheduled runs: ScheduleDef, cron, the sidecar's sweeper and the EventBridge adapter."""
