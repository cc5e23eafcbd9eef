"""The CDK app (`cdk.json` at the repository root runs it).

Context (`cdk deploy -c key=value`; every knob of docs/deploy-aws.md is one of these):
  stack_name            stack name (default Treadle); a second stack beside it needs only another name
  config                operator YAML shipped with the functions (default: ./treadle.yaml if present,
                        else the starter with mock agents)
  layer_dir             the built dependency layer (default layers/build/layer; `layers/build.py` makes it)
  vpc_id                deploy into an existing VPC (needs CDK_DEFAULT_ACCOUNT/REGION, i.e. credentials)
  nat_gateways          NAT gateways of the created VPC (default 1; ~$33/month each)
  alarm_email           subscribe an address to the alarm topic
  db_min_acu            Aurora Serverless v2 minimum capacity (default 0.5; 0 lets it pause when idle)
  db_max_acu            Aurora Serverless v2 maximum capacity (default 4; sets max_connections too)
  deletion_protection   "true" to protect the database
  rds_proxy             "true" to connect through RDS Proxy (default false: direct, ~$88/month less)
  require_pgvector      "false" lets a deploy proceed without pgvector (default true)
  reserved_concurrency  "false" leaves the functions in the account's unreserved pool (an account
                        whose concurrency quota is 10 cannot reserve any)
  worker_concurrency    concurrent workers (default 20), api_concurrency (20), stream_concurrency (20),
                        ws_concurrency (10)
  worker_timeout_s      the worker's timeout (default 900, Lambda's maximum)
  db_pool_size          database connections per function environment (default 2)
  worker_memory_mb      the worker's memory (default 512; peak ~80 MB, docs/deploy-aws.md "Memory and cost")
  api_memory_mb         the api function's memory (default 512)
  stream                "false" leaves out the stream function and its URL
  live_deltas           "false": the stream function streams committed events only (no text deltas
                        relayed through Postgres NOTIFY; no listener connection per stream environment)
  websocket             "false" leaves out the WebSocket API and its ws function (watchers pushed to,
                        no Lambda held per watcher)
  lwa_layer_version     the Lambda Web Adapter layer version the stream function runs (default 25)
  architecture          x86_64 (default) or arm64 (build the layer with --arch arm64 too)
  snap_start            "false" turns SnapStart off
  byte_compile          "false" ships the code uncompiled when no Python 3.12 is at hand
  sse_budget_s          how long an SSE response behind the HTTP API may last (default 25)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_lambda as lambda_  # noqa: E402

from treadle_infra import TreadleRuntimeProps, TreadleStack  # noqa: E402
from treadle_infra.assets import DEFAULT_LAYER_DIR, ROOT  # noqa: E402


def flag(value: Any, default: bool) -> bool:
    if value is None:
        return default
    text = str(value).lower()
    if text not in ("true", "false"):
        raise SystemExit(f"a -c flag takes true or false, not {value!r}")
    return text == "true"


def number(value: Any, default: float, name: str) -> float:
    try:
        return default if value is None else float(value)
    except ValueError:
        raise SystemExit(f"-c {name}: expected a number, not {value!r}") from None


def props_from_context(ctx: Any) -> TreadleRuntimeProps:
    config = ctx("config") or (str(ROOT / "treadle.yaml") if (ROOT / "treadle.yaml").exists() else None)
    arch = ctx("architecture") or "x86_64"
    if arch not in ("x86_64", "arm64"):
        raise SystemExit(f"-c architecture: x86_64 or arm64, not {arch!r}")
    base = TreadleRuntimeProps()
    concurrency = dict(base.concurrency)
    for name in ("api", "stream", "ws"):
        concurrency[name] = int(number(ctx(f"{name}_concurrency"), concurrency[name], f"{name}_concurrency"))
    return TreadleRuntimeProps(
        config_file=Path(config) if config else None,
        layer_dir=Path(ctx("layer_dir") or DEFAULT_LAYER_DIR),
        nat_gateways=int(number(ctx("nat_gateways"), base.nat_gateways, "nat_gateways")),
        alarm_email=ctx("alarm_email"),
        db_min_capacity=number(ctx("db_min_acu"), base.db_min_capacity, "db_min_acu"),
        db_max_capacity=number(ctx("db_max_acu"), base.db_max_capacity, "db_max_acu"),
        db_deletion_protection=flag(ctx("deletion_protection"), False),
        rds_proxy=flag(ctx("rds_proxy"), base.rds_proxy),
        require_pgvector=flag(ctx("require_pgvector"), base.require_pgvector),
        reserved_concurrency=flag(ctx("reserved_concurrency"), base.reserved_concurrency),
        worker_max_concurrency=int(number(ctx("worker_concurrency"), base.worker_max_concurrency,
                                          "worker_concurrency")),
        concurrency=concurrency,
        worker_timeout=cdk.Duration.seconds(number(ctx("worker_timeout_s"), base.worker_timeout.to_seconds(),
                                                   "worker_timeout_s")),
        db_pool_size=int(number(ctx("db_pool_size"), base.db_pool_size, "db_pool_size")),
        worker_memory_mb=int(number(ctx("worker_memory_mb"), base.worker_memory_mb, "worker_memory_mb")),
        api_memory_mb=int(number(ctx("api_memory_mb"), base.api_memory_mb, "api_memory_mb")),
        stream=flag(ctx("stream"), base.stream),
        websocket=flag(ctx("websocket"), base.websocket),
        live_deltas=flag(ctx("live_deltas"), base.live_deltas),
        lwa_layer_version=int(number(ctx("lwa_layer_version"), base.lwa_layer_version, "lwa_layer_version")),
        architecture=lambda_.Architecture.ARM_64 if arch == "arm64" else lambda_.Architecture.X86_64,
        snap_start=flag(ctx("snap_start"), base.snap_start),
        byte_compile=flag(ctx("byte_compile"), base.byte_compile),
        sse_budget_seconds=int(number(ctx("sse_budget_s"), base.sse_budget_seconds, "sse_budget_s")),
    )


def main() -> None:
    app = cdk.App()
    ctx = app.node.try_get_context
    props = props_from_context(ctx)
    vpc_id = ctx("vpc_id")
    env = None
    if vpc_id:
        env = cdk.Environment(account=os.environ["CDK_DEFAULT_ACCOUNT"], region=os.environ["CDK_DEFAULT_REGION"])
    TreadleStack(app, ctx("stack_name") or "Treadle", props=props, vpc_id=vpc_id, env=env)
    app.synth()


if __name__ == "__main__":
    main()
