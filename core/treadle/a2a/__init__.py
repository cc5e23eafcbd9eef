"""A2A beside MCP: the task view of a run (tasks.py, read by the server in api/a2a/ and by push
delivery), remote A2A agents as tools `a2a__<peer>__<skill>` (client.py), and push notifications
to peers that follow this treadle's tasks (push.py). The SDK (`a2a-sdk`) is imported on first use."""
