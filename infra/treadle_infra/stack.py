"""`TreadleStack`: the construct plus its outputs. Environment-agnostic (no account or region
lookups) unless an existing VPC is named, so `cdk synth` runs offline."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack, Tags
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from treadle_infra.runtime import TreadleRuntime, TreadleRuntimeProps


class TreadleStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: TreadleRuntimeProps | None = None,
        vpc_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, description="treadle: a durable agent runtime (cloud shape)", **kwargs)
        props = props or TreadleRuntimeProps()
        if vpc_id:  # a lookup: needs a concrete account/region (env) and credentials at synth
            props.vpc = ec2.Vpc.from_lookup(self, "ExistingVpc", vpc_id=vpc_id)
        self.runtime = TreadleRuntime(self, "Treadle", props)
        self.runtime.add_outputs(self)
        # (the proxy target group is taggable in CDK, not in CloudFormation)
        Tags.of(self).add("app", "treadle", exclude_resource_types=["AWS::RDS::DBProxyTargetGroup"])
