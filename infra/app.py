"""The CDK app (`cdk.json` at the repository root runs it).

Context (`cdk deploy -c key=value`):
  stack_name      stack name (default Treadle)
  config          operator YAML shipped with the functions (default: ./treadle.yaml if present,
                  else the starter with mock agents)
  layer_dir       the built dependency layer (default layers/build/layer; `layers/build.py` makes it)
  vpc_id          deploy into an existing VPC (needs CDK_DEFAULT_ACCOUNT/REGION, i.e. credentials)
  alarm_email     subscribe an address to the alarm topic
  db_min_acu      Aurora Serverless v2 minimum capacity (default 0.5; 0 lets it pause when idle)
  deletion_protection  "true" to protect the database
  rds_proxy       "false" to connect the functions to Aurora directly (no RDS Proxy charge)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aws_cdk as cdk  # noqa: E402

from treadle_infra import TreadleRuntimeProps, TreadleStack  # noqa: E402
from treadle_infra.assets import DEFAULT_LAYER_DIR, ROOT  # noqa: E402


def main() -> None:
    app = cdk.App()
    ctx = app.node.try_get_context
    config = ctx("config") or (str(ROOT / "treadle.yaml") if (ROOT / "treadle.yaml").exists() else None)
    props = TreadleRuntimeProps(
        config_file=Path(config) if config else None,
        layer_dir=Path(ctx("layer_dir") or DEFAULT_LAYER_DIR),
        alarm_email=ctx("alarm_email"),
        db_min_capacity=float(ctx("db_min_acu") or 0.5),
        db_deletion_protection=str(ctx("deletion_protection")).lower() == "true",
        rds_proxy=str(ctx("rds_proxy")).lower() != "false",
    )
    vpc_id = ctx("vpc_id")
    env = None
    if vpc_id:
        env = cdk.Environment(account=os.environ["CDK_DEFAULT_ACCOUNT"], region=os.environ["CDK_DEFAULT_REGION"])
    TreadleStack(app, ctx("stack_name") or "Treadle", props=props, vpc_id=vpc_id, env=env)
    app.synth()


if __name__ == "__main__":
    main()
