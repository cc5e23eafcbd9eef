#!/bin/sh
# The stream function's entry point: the Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap)
# runs this, then relays function URL requests to it (treadle_cloud/stream.py).
export PYTHONPATH="/var/task:/opt/python${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m treadle_cloud.stream
