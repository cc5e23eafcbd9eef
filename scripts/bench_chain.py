"""What chaining a run's steps inside one worker invocation saves, on the local cloud (a script,
not a test: it prints a table).

    .venv/bin/python scripts/bench_chain.py [--runs 20] [--tool-calls 3]

moto's SQS server on loopback, a scratch Postgres database, the real api and worker handler
modules in imitated Lambda environments (tests/support/lambda_sim.py) and an event source
mapping of batch size 1, as the stack configures it. Each run of a mock agent makes
`--tool-calls` tool calls (that many + 1 steps). Measured twice — every step its own SQS
message (TREADLE_CHAIN_STEPS=1), then chained while the invocation has time left (the default):
per run, the time from the start to the run's end, the messages sent and the worker invocations.
On AWS an SQS hop (send → the event source mapping's poll → invoke) adds ~16 ms p50 / 105 ms p99
per step on top of what is measured here (moto answers on loopback and the poller is a loop).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def scenario(chain: bool, runs: int, tool_calls: int, sqs: Any, db: str, config: Path) -> dict[str, float]:
    from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event

    queue = sqs.create_queue(QueueName=f"bench-chain-{int(chain)}-{os.getpid()}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    os.environ.update({"DATABASE_URL": db, "TREADLE_QUEUE_URL": queue, "TREADLE_CONFIG": str(config),
                       "TREADLE_AUTH_TOKEN": "bench", "TREADLE_CHAIN_STEPS": "8" if chain else "1",
                       "TREADLE_CHAIN_RESERVE_SECONDS": "5"})
    api, worker = LambdaEnv("api"), LambdaEnv("worker", timeout_s=900)
    import psycopg

    durations: list[float] = []
    try:
        esm = EventSourceMapping(sqs, queue, arn, [worker], batch_size=1)
        for _ in range(runs):  # one run at a time: its latency, not the queue's throughput
            t0 = time.perf_counter()
            resp = api.invoke(http_event("POST", "/v1/runs", headers={"authorization": "Bearer bench"},
                                         body={"agent": "calc", "prompt": "hi"}))
            run_id = json.loads(resp["body"])["run_id"]

            def done(run_id: str = run_id) -> bool:
                with psycopg.connect(db) as conn:
                    row = conn.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
                return row is not None and row[0] == "completed"

            esm.run_until(done, timeout_s=120)
            durations.append(time.perf_counter() - t0)
        worker_sent = worker.handler.container.runtime().dispatcher.sent
        return {
            "p50_ms": 1000 * statistics.median(durations),
            "p90_ms": 1000 * sorted(durations)[int(0.9 * (len(durations) - 1))],
            "messages_per_run": (worker_sent + runs) / runs,  # the api sends each run's first
            "invocations_per_run": worker.invocations / runs,
        }
    finally:
        api.close()
        worker.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tool-calls", type=int, default=3)
    args = ap.parse_args()
    import boto3
    from moto.server import ThreadedMotoServer
    from tests.support.db import create_database, drop_database, server_url

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    logging.getLogger("treadle").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
                       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    admin = server_url()
    db = create_database(admin, "chain")
    config = ROOT / ".treadle" / "bench_chain.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"agents": {"calc": {
        "provider": "mock", "model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": args.tool_calls}}}}))
    try:
        sqs = boto3.client("sqs")
        rows = []
        for chain in (False, True):
            r = scenario(chain, args.runs, args.tool_calls, sqs, db, config)
            rows.append(["chained (default)" if chain else "one message per step", f"{r['p50_ms']:.0f}",
                         f"{r['p90_ms']:.0f}", f"{r['messages_per_run']:.1f}", f"{r['invocations_per_run']:.1f}"])
        sys.path.insert(0, str(ROOT / "scripts"))
        from coldstart import table

        table(f"{args.runs} runs of {args.tool_calls + 1} steps each, one after another (moto SQS, batch size 1)",
              ["worker", "run p50 ms", "run p90 ms", "SQS messages / run", "worker invocations / run"], rows)
    finally:
        drop_database(admin, db)
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
