"""`python -m treadle_cloud.doctor --stack Treadle`: `treadle doctor` for a deployed stack.

The database sits in isolated subnets, so the checks run where it is reachable: in the stack's
migrate function (`{"action": "doctor"}`), found through the stack's `MigrateFunctionName`
output. Prints its PASS/WARN/FAIL lines; exits 1 on a FAIL. `--migrate` applies pending
migrations first (what every deploy does through the custom resource).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

OUTPUT = "MigrateFunctionName"


def function_name(cloudformation: Any, stack: str) -> str:
    outputs = cloudformation.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    for out in outputs:
        if out["OutputKey"] == OUTPUT:
            return str(out["OutputValue"])
    raise SystemExit(f"stack {stack} has no {OUTPUT} output (deployed before the migrate function existed?)")


def invoke(lambda_client: Any, name: str, payload: dict[str, Any]) -> dict[str, Any]:
    resp = lambda_client.invoke(FunctionName=name, Payload=json.dumps(payload).encode())
    body = json.loads(resp["Payload"].read() or b"null")
    if resp.get("FunctionError"):
        raise SystemExit(f"{name} failed: {body.get('errorType')}: {body.get('errorMessage')}")
    if not isinstance(body, dict):
        raise SystemExit(f"{name} answered {body!r}")
    return body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m treadle_cloud.doctor", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stack", default="Treadle", help="the CloudFormation stack (default Treadle)")
    ap.add_argument("--migrate", action="store_true", help="apply pending migrations first")
    args = ap.parse_args(argv)
    import boto3

    name = function_name(boto3.client("cloudformation"), args.stack)
    out = invoke(boto3.client("lambda"), name, {"action": "migrate" if args.migrate else "doctor"})
    for line in out.get("lines", []):
        print(line)
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
