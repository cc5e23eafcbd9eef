"""The CDK app: synthesized once in Python (aws_cdk.assertions), then linted with cfn-lint.
Synth takes ~10 s (jsii starts node), so every assertion shares one template."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.lambda_sim import WORKER_BATCH_SIZE

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DOC = ROOT / "docs" / "deploy-aws.md"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="CDK synth needs node on PATH")

CONFIG = """\
agents:
  helper:
    provider: mock
    model: tool-caller
    tools: [Memory]
"""
FUNCTIONS = ("api", "worker", "webhook", "mcp", "scheduler", "maintenance", "migrate", "stream", "ws")
#: what invokes a SnapStart version through its `live` alias (migrate and stream run unsnapshotted)
SNAPPED = ("api", "worker", "webhook", "mcp", "scheduler", "maintenance", "ws")


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    sys.path.insert(0, str(ROOT / "infra"))
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from treadle_infra import TreadleRuntimeProps, TreadleStack

    tmp = tmp_path_factory.mktemp("cdk")
    (tmp / "layer" / "python").mkdir(parents=True)
    (tmp / "layer" / "python" / "placeholder.txt").write_text("a stand-in for the built layer\n")
    (tmp / "treadle.yaml").write_text(CONFIG)
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(tmp / "cdk.out"), context=context)
    props = TreadleRuntimeProps(layer_dir=tmp / "layer", staging_dir=tmp / "app", config_file=tmp / "treadle.yaml",
                                byte_compile=False, rds_proxy=True)
    stack = TreadleStack(app, "Treadle", props=props)
    # a second stack beside the first, in the same app (account, region): staging next to prod,
    # with the defaults (no RDS Proxy)
    staging_props = TreadleRuntimeProps(layer_dir=tmp / "layer", staging_dir=tmp / "app-staging",
                                        config_file=tmp / "treadle.yaml", byte_compile=False)
    staging_stack = TreadleStack(app, "TreadleStaging", props=staging_props)
    template = Template.from_stack(stack)
    staging = Template.from_stack(staging_stack)
    return {"template": template, "json": template.to_json(), "tmp": tmp, "staging": staging.to_json()}


def resources(t: Mapping[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == rtype}


def handler_of(name: str) -> str:
    return "functions/stream/run.sh" if name == "stream" else f"functions.{name}.handler.handler"


def python_functions(t: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """treadle's functions (not CDK's custom-resource framework function)."""
    return {k: r for k, r in resources(t, "AWS::Lambda::Function").items()
            if r["Properties"].get("Runtime", "").startswith("python")}


def function_id(t: Mapping[str, Any], name: str) -> str:
    [fid] = [k for k, r in python_functions(t).items() if r["Properties"]["Handler"] == handler_of(name)]
    return fid


def entry_ref(t: Mapping[str, Any], name: str) -> dict[str, str]:
    """What triggers invoke: the function's `live` alias (SnapStart serves published versions only)."""
    [alias_id] = [k for k, r in resources(t, "AWS::Lambda::Alias").items()
                  if r["Properties"]["FunctionName"] == {"Ref": function_id(t, name)}]
    return {"Ref": alias_id}


def role_statements(t: Mapping[str, Any], fid: str) -> list[dict[str, Any]]:
    role = t["Resources"][fid]["Properties"]["Role"]["Fn::GetAtt"][0]
    out = []
    for pol in resources(t, "AWS::IAM::Policy").values():
        if {"Ref": role} in pol["Properties"]["Roles"]:
            out.extend(pol["Properties"]["PolicyDocument"]["Statement"])
    return out


def stmt_resources(s: dict[str, Any]) -> list[Any]:
    return s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]


def actions(stmts: list[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for s in stmts:
        out.update([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    return out


def test_functions_layer_and_code(synth: dict[str, Any]) -> None:
    t = synth["json"]
    fns = python_functions(t)
    assert sorted(r["Properties"]["Handler"] for r in fns.values()) == sorted(handler_of(n) for n in FUNCTIONS)
    [layer_id] = resources(t, "AWS::Lambda::LayerVersion")
    for r in fns.values():
        p = r["Properties"]
        assert p["Runtime"] == "python3.12" and p["Layers"][0] == {"Ref": layer_id}
        assert p["VpcConfig"]["SubnetIds"] and p["LoggingConfig"]["LogFormat"] == "JSON"
        env = p["Environment"]["Variables"]
        assert {"TREADLE_QUEUE_URL", "TREADLE_DB_SECRET_ARN", "TREADLE_DB_HOST", "TREADLE_CONFIG"} <= set(env)
    worker = fns[function_id(t, "worker")]["Properties"]
    assert worker["Timeout"] == 900 and "TREADLE_PROVIDER_KEYS_SECRET_ARN" in worker["Environment"]["Variables"]
    assert fns[function_id(t, "api")]["Properties"]["Timeout"] == 30
    groups = resources(t, "AWS::Logs::LogGroup")  # the functions', the provider framework's, the API's access logs
    assert len(groups) == len(FUNCTIONS) + 2 and {g["Properties"]["RetentionInDays"] for g in groups.values()} == {30}
    assert all(g["DeletionPolicy"] == "Delete" for g in groups.values())

    staged = synth["tmp"] / "app"
    assert (staged / "treadle.yaml").read_text() == CONFIG
    # the functions read the same configuration as JSON (no PyYAML at a cold start)
    from treadle.config import load_config

    assert load_config(staged / "treadle.json") == load_config(staged / "treadle.yaml")
    assert {r["Properties"]["Environment"]["Variables"]["TREADLE_CONFIG"] for r in fns.values()} == {
        "/var/task/treadle.json"}
    for rel in ("treadle/runtime.py", "treadle/store/migrations/0002_pgvector.sql", "treadle_cloud/worker.py",
                *(f"functions/{n}/handler.py" for n in FUNCTIONS if n != "stream"), "functions/stream/run.sh"):
        assert (staged / rel).is_file(), rel
    assert not list(staged.rglob("__pycache__")) and not (staged / "treadle_sidecar").exists()
    assert os.access(staged / "functions" / "stream" / "run.sh", os.X_OK)  # the adapter executes it


def test_database_proxy_and_secrets(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    tpl.has_resource_properties("AWS::RDS::DBCluster", {
        "Engine": "aurora-postgresql",
        "EngineVersion": "17.5",
        "StorageEncrypted": True,
        "DatabaseName": "treadle",
        "ServerlessV2ScalingConfiguration": {"MinCapacity": 0.5, "MaxCapacity": 4},
    })
    tpl.has_resource_properties("AWS::RDS::DBInstance", {"DBInstanceClass": "db.serverless",
                                                         "PubliclyAccessible": False})
    tpl.has_resource_properties("AWS::RDS::DBProxy", {"EngineFamily": "POSTGRESQL", "RequireTLS": True})
    assert len(resources(t, "AWS::SecretsManager::Secret")) == 4  # database, API token, provider keys, webhooks
    [proxy] = resources(t, "AWS::RDS::DBProxy").values()
    assert proxy["Properties"]["VpcSubnetIds"]
    assert proxy["Properties"]["DBProxyName"] == "Treadle-proxy"  # unique per stack, not the construct id


def test_queue_dlq_and_event_source_mapping(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    queues = resources(t, "AWS::SQS::Queue")
    [(main_id, main)] = [(k, q) for k, q in queues.items() if "RedrivePolicy" in q["Properties"]]
    [dlq_id] = [k for k in queues if "DeadLetter" in k]
    assert main["Properties"]["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]}, "maxReceiveCount": 10}
    assert main["Properties"]["VisibilityTimeout"] == 6 * 900
    assert not main["Properties"].get("FifoQueue")
    tpl.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [main_id, "Arn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "BatchSize": WORKER_BATCH_SIZE,  # what tests/support/lambda_sim.py's event source mapping takes
        "ScalingConfig": {"MaximumConcurrency": 20},
    })
    [mapping] = resources(t, "AWS::Lambda::EventSourceMapping").values()
    # the worker's live alias (CDK names it as function name + ":live")
    assert entry_ref(t, "worker")["Ref"] in json.dumps(mapping["Properties"]["FunctionName"])


def test_least_privilege_iam(synth: dict[str, Any]) -> None:
    t = synth["json"]
    for pol in resources(t, "AWS::IAM::Policy").values():
        for s in pol["Properties"]["PolicyDocument"]["Statement"]:
            assert s["Effect"] == "Allow" and "*" not in stmt_resources(s) and "*" not in actions([s]), s
    worker = actions(role_statements(t, function_id(t, "worker")))
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage"} <= worker
    api = role_statements(t, function_id(t, "api"))
    assert "sqs:ReceiveMessage" not in actions(api) and "sqs:SendMessage" in actions(api)
    for fn in ("api", "maintenance"):  # ScheduleDef ops / reconciling every minute
        stmts = role_statements(t, function_id(t, fn))
        [sched] = [s for s in stmts if "scheduler:CreateSchedule" in actions([s])]
        assert "schedule/" in json.dumps(sched["Resource"]) and "iam:PassRole" in actions(stmts)

    [keys_id] = [k for k, r in resources(t, "AWS::SecretsManager::Secret").items() if "ProviderKeys" in k]
    readers = [fn for fn in FUNCTIONS
               if any({"Ref": keys_id} in stmt_resources(s) for s in role_statements(t, function_id(t, fn)))]
    assert readers == ["worker"]  # only the worker calls models
    [hooks_id] = [k for k in resources(t, "AWS::SecretsManager::Secret") if "WebhookSecrets" in k]
    readers = [fn for fn in FUNCTIONS
               if any({"Ref": hooks_id} in stmt_resources(s) for s in role_statements(t, function_id(t, fn)))]
    assert readers == ["webhook"]  # only the webhook function verifies signatures
    for fn in ("scheduler", "worker", "webhook", "mcp", "stream", "migrate"):
        assert not any("scheduler:" in a for a in actions(role_statements(t, function_id(t, fn))))
    assert "sqs:SendMessage" not in actions(role_statements(t, function_id(t, "migrate")))


def test_the_volumes_bucket(synth: dict[str, Any]) -> None:
    t = synth["json"]
    [(bucket_id, bucket)] = [(k, r) for k, r in resources(t, "AWS::S3::Bucket").items() if "Volumes" in k]
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"}
    assert bucket["DeletionPolicy"] == "Retain"  # the agents' files outlive `cdk destroy`
    writers = [fn for fn in FUNCTIONS if "s3:PutObject" in actions(role_statements(t, function_id(t, fn)))]
    assert sorted(writers) == ["api", "maintenance", "worker"]
    for fn in FUNCTIONS:
        env = resources(t, "AWS::Lambda::Function")[function_id(t, fn)]["Properties"]["Environment"]["Variables"]
        assert env["TREADLE_VOLUMES_BUCKET"] == {"Ref": bucket_id}
    assert any(r["Properties"].get("VpcEndpointType") == "Gateway" and "s3" in json.dumps(r["Properties"])
               for r in resources(t, "AWS::EC2::VPCEndpoint").values())


def test_http_api_routes(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    [http_id] = resources_of_protocol(t, "HTTP")
    routes = {r["Properties"]["RouteKey"] for r in resources(t, "AWS::ApiGatewayV2::Route").values()
              if r["Properties"]["ApiId"] == {"Ref": http_id}}
    assert routes == {"ANY /{proxy+}", "ANY /v1/_webhooks/{proxy+}", "ANY /v1/_mcp", "ANY /mcp"}
    assert len([r for r in resources(t, "AWS::ApiGatewayV2::Integration").values()
                if r["Properties"]["ApiId"] == {"Ref": http_id}]) == 3
    tpl.has_resource_properties("AWS::ApiGatewayV2::Integration", {"PayloadFormatVersion": "2.0"})
    assert set(t["Outputs"]) >= {"ApiUrl", "QueueUrl"}


def test_scheduler_group_role_and_maintenance_schedule(synth: dict[str, Any]) -> None:
    tpl, t = synth["template"], synth["json"]
    tpl.resource_count_is("AWS::Scheduler::ScheduleGroup", 1)
    [group] = resources(t, "AWS::Scheduler::ScheduleGroup").values()
    assert group["DeletionPolicy"] == "Delete"  # cdk destroy removes it (and the schedules in it)
    [schedule] = resources(t, "AWS::Scheduler::Schedule").values()
    assert schedule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert schedule["Properties"]["Target"]["Arn"] == entry_ref(t, "maintenance")
    roles = [r for r in resources(t, "AWS::IAM::Role").values()
             if "scheduler.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    assert len(roles) == 2  # the group's (for treadle's schedules) and the maintenance schedule's


def test_snapstart_versions_and_aliases(synth: dict[str, Any]) -> None:
    """Every function snapshots its published versions, and every trigger invokes the `live`
    alias of the current version (the HTTP API, SQS, the maintenance schedule, treadle's own
    schedules through TREADLE_SCHEDULER_TARGET_ARN)."""
    t = synth["json"]
    fns = resources(t, "AWS::Lambda::Function")
    versions = resources(t, "AWS::Lambda::Version")
    aliases = resources(t, "AWS::Lambda::Alias")
    assert len(versions) == len(aliases) == len(SNAPPED)
    for name in SNAPPED:
        fid = function_id(t, name)
        assert fns[fid]["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
        [alias] = [a for k, a in aliases.items() if {"Ref": k} == entry_ref(t, name)]
        assert alias["Properties"]["Name"] == "live"
        version_id = alias["Properties"]["FunctionVersion"]["Fn::GetAtt"][0]
        assert versions[version_id]["Properties"]["FunctionName"] == {"Ref": fid}
    integrations = json.dumps(resources(t, "AWS::ApiGatewayV2::Integration"))
    for name in ("api", "webhook", "mcp"):
        assert entry_ref(t, name)["Ref"] in integrations and function_id(t, name) not in integrations
    api_env = fns[function_id(t, "api")]["Properties"]["Environment"]["Variables"]
    assert api_env["TREADLE_SCHEDULER_TARGET_ARN"] == entry_ref(t, "scheduler")
    assert api_env["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    # the scheduler role may invoke the alias treadle's schedules target
    invoke = [s for pol in resources(t, "AWS::IAM::Policy").values()
              for s in pol["Properties"]["PolicyDocument"]["Statement"] if "lambda:InvokeFunction" in actions([s])]
    assert any(entry_ref(t, "scheduler") in stmt_resources(s) for s in invoke)


def test_alarms(synth: dict[str, Any]) -> None:
    t = synth["json"]
    alarms = resources(t, "AWS::CloudWatch::Alarm")
    [topic_id] = resources(t, "AWS::SNS::Topic")
    for a in alarms.values():
        assert a["Properties"]["AlarmActions"] == [{"Ref": topic_id}], a

    def find(metric: str, ref: str) -> dict[str, Any]:
        [p] = [a["Properties"] for a in alarms.values()
               if a["Properties"].get("MetricName") == metric and ref in json.dumps(a["Properties"].get("Dimensions"))]
        result: dict[str, Any] = p
        return result

    queues = resources(t, "AWS::SQS::Queue")
    [dlq_id] = [k for k in queues if "DeadLetter" in k]
    [failed_id] = [k for k in queues if "FailedInvocations" in k]
    p = find("ApproximateNumberOfMessagesVisible", dlq_id)
    assert p["Threshold"] == 1 and p["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert find("ApproximateNumberOfMessagesVisible", failed_id)["Threshold"] == 1
    [main_id] = [k for k in queues if "StepQueue" in k]
    assert find("ApproximateAgeOfOldestMessage", main_id)["Threshold"] == 300
    maintenance = find("Errors", function_id(t, "maintenance"))  # the recovery path
    assert (maintenance["Period"], maintenance["EvaluationPeriods"], maintenance["DatapointsToAlarm"]) == (60, 3, 2)
    assert find("Errors", function_id(t, "worker"))["Threshold"] == 5
    assert find("Throttles", function_id(t, "worker"))["Threshold"] == 1
    assert find("Throttles", function_id(t, "stream"))["Threshold"] == 1
    [api_id] = resources_of_protocol(t, "HTTP")
    assert find("5xx", api_id)["Namespace"] == "AWS/ApiGateway"
    [cluster_id] = resources(t, "AWS::RDS::DBCluster")
    assert find("ACUUtilization", cluster_id)["Threshold"] == 90
    assert find("DatabaseConnections", cluster_id)["Threshold"] == int(0.8 * int(0.9 * 901))
    assert len(alarms) == 12
    # as docs/deploy-aws.md counts and prices them (issue 43 item 8: it said 10)
    assert set(re.findall(r"(\d+) alarms", DEPLOY_DOC.read_text())) == {str(len(alarms))}
    stopped = find("Invocations", function_id(t, "maintenance"))  # the recovery path stopped running
    assert (stopped["ComparisonOperator"], stopped["TreatMissingData"]) == ("LessThanThreshold", "breaching")
    # every run failing moves no Lambda error: the failed-run rate from the workers' EMF RunsFinished{status}
    [failed] = [a["Properties"] for a in alarms.values() if "Metrics" in a["Properties"]]
    assert failed["Threshold"] == 50
    used = {m["Id"]: m["MetricStat"]["Metric"] for m in failed["Metrics"] if "MetricStat" in m}
    assert {m["MetricName"] for m in used.values()} == {"RunsFinished"}
    assert {d["Value"] for m in used.values() for d in m["Dimensions"] if d["Name"] == "status"} == {
        "failed", "completed", "cancelled"}


def test_api_access_logs_and_failure_destinations(synth: dict[str, Any]) -> None:
    t = synth["json"]
    [logs_id] = [k for k in resources(t, "AWS::Logs::LogGroup") if "ApiAccessLogs" in k]
    [http_id] = resources_of_protocol(t, "HTTP")
    [stage] = [s for s in resources(t, "AWS::ApiGatewayV2::Stage").values()
               if s["Properties"]["ApiId"] == {"Ref": http_id}]
    settings = stage["Properties"]["AccessLogSettings"]
    assert settings["DestinationArn"] == {"Fn::GetAtt": [logs_id, "Arn"]}
    assert {"status", "integrationError", "latencyMs"} <= set(json.loads(settings["Format"]))
    [failed_id] = [k for k in resources(t, "AWS::SQS::Queue") if "FailedInvocations" in k]
    configs = {c["Properties"]["FunctionName"]["Ref"]: c["Properties"]
               for c in resources(t, "AWS::Lambda::EventInvokeConfig").values()}
    assert set(configs) == {function_id(t, "maintenance"), function_id(t, "scheduler")}  # invoked asynchronously
    for c in configs.values():
        assert c["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [failed_id, "Arn"]}
        assert entry_ref(t, "maintenance" if c is configs[function_id(t, "maintenance")] else "scheduler")[
            "Ref"] in json.dumps(c["Qualifier"])
    assert configs[function_id(t, "maintenance")]["MaximumRetryAttempts"] == 0
    [schedule] = resources(t, "AWS::Scheduler::Schedule").values()
    assert schedule["Properties"]["Target"]["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [failed_id, "Arn"]}}


def test_migrations_custom_resource_gates_every_new_version(synth: dict[str, Any]) -> None:
    t = synth["json"]
    [(cr_id, cr)] = resources(t, "Custom::TreadleMigrations").items()
    props = cr["Properties"]
    assert props["RequirePgvector"] == "true" and len(props["Migrations"]) == 16
    [framework_id] = [k for k, r in resources(t, "AWS::Lambda::Function").items()
                      if k not in python_functions(t) and "MigrationsProvider" in k]
    assert props["ServiceToken"] == {"Fn::GetAtt": [framework_id, "Arn"]}
    framework = t["Resources"][framework_id]["Properties"]
    assert function_id(t, "migrate") in json.dumps(framework["Environment"])  # the on-event handler
    # after the database (and the proxy), before any function's new version
    [cluster_id] = resources(t, "AWS::RDS::DBCluster")
    [instance_id] = resources(t, "AWS::RDS::DBInstance")
    [target_group] = resources(t, "AWS::RDS::DBProxyTargetGroup")
    assert {cluster_id, instance_id, target_group} <= set(cr["DependsOn"])
    for name in SNAPPED:
        assert cr_id in t["Resources"][entry_ref(t, name)["Ref"]]["DependsOn"], name
    assert cr_id in t["Resources"][function_id(t, "stream")]["DependsOn"]
    migrate = t["Resources"][function_id(t, "migrate")]["Properties"]
    assert migrate["Timeout"] == 300 and migrate["Environment"]["Variables"]["TREADLE_REQUIRE_PGVECTOR"] == "true"
    assert "SnapStart" not in migrate
    assert "MigrateFunctionName" in t["Outputs"]
    from treadle_infra.runtime import migrations_digest

    assert props["Migrations"] == migrations_digest()


def test_stream_function_url_streams_behind_the_api_token(synth: dict[str, Any]) -> None:
    t = synth["json"]
    fid = function_id(t, "stream")
    fn = t["Resources"][fid]["Properties"]
    [url] = resources(t, "AWS::Lambda::Url").values()
    assert url["Properties"] == {"AuthType": "NONE", "InvokeMode": "RESPONSE_STREAM",
                                 "TargetFunctionArn": {"Fn::GetAtt": [fid, "Arn"]}}
    env = fn["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap" and env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/healthz"
    assert int(env["TREADLE_SSE_BUDGET_SECONDS"]) < fn["Timeout"] == 900
    assert "LambdaAdapterLayerX86:25" in json.dumps(fn["Layers"][1])  # the adapter, pinned
    assert "SnapStart" not in fn
    # live deltas: worker and stream relay through NOTIFY; behind the proxy the listener goes to
    # Aurora itself (a LISTEN session would pin a proxy connection), and may
    [cluster_id] = resources(t, "AWS::RDS::DBCluster")
    assert env["TREADLE_LIVE_DELTAS"] == "true"
    assert t["Resources"][function_id(t, "worker")]["Properties"]["Environment"]["Variables"][
        "TREADLE_LIVE_DELTAS"] == "true"
    assert env["TREADLE_LIVE_DB_HOST"] == {"Fn::GetAtt": [cluster_id, "Endpoint.Address"]}
    assert any("live listener" in r["Properties"].get("Description", "")
               for r in resources(t, "AWS::EC2::SecurityGroupIngress").values())
    staging = synth["staging"]
    staging_env = staging["Resources"][function_id(staging, "stream")]["Properties"]["Environment"]["Variables"]
    assert staging_env["TREADLE_LIVE_DELTAS"] == "true" and "TREADLE_LIVE_DB_HOST" not in staging_env
    # the API's token: the function reads it (auth type NONE only opens the URL to the app's check)
    [token_id] = [k for k in resources(t, "AWS::SecretsManager::Secret") if "ApiToken" in k]
    assert env["TREADLE_API_TOKEN_SECRET_ARN"] == {"Ref": token_id}
    assert any({"Ref": token_id} in stmt_resources(s) for s in role_statements(t, fid))
    assert "StreamUrl" in t["Outputs"]


def test_websocket_api_pushes_to_watchers_without_a_lambda_each(synth: dict[str, Any]) -> None:
    t = synth["json"]
    [(api_id, api)] = resources_of_protocol(t, "WEBSOCKET").items()
    assert api["Properties"]["RouteSelectionExpression"] == "$request.body.action"
    routes = {r["Properties"]["RouteKey"]: r["Properties"] for r in resources(t, "AWS::ApiGatewayV2::Route").values()
              if r["Properties"]["ApiId"] == {"Ref": api_id}}
    assert set(routes) == {"$connect", "$disconnect", "$default", "subscribe", "unsubscribe"}
    # every route goes to the ws function's SnapStart alias (the $connect auth is the function's own)
    integrations = {k: r["Properties"] for k, r in resources(t, "AWS::ApiGatewayV2::Integration").items()
                    if r["Properties"]["ApiId"] == {"Ref": api_id}}
    for props in routes.values():
        assert props.get("AuthorizationType", "NONE") == "NONE"
        target = props["Target"]["Fn::Join"][1][-1]
        uri = json.dumps(integrations[target["Ref"]]["IntegrationUri"])
        assert entry_ref(t, "ws")["Ref"] in uri and integrations[target["Ref"]]["IntegrationType"] == "AWS_PROXY"
    [stage] = [r for r in resources(t, "AWS::ApiGatewayV2::Stage").values()
               if r["Properties"]["ApiId"] == {"Ref": api_id}]
    assert stage["Properties"]["StageName"] == "live" and stage["Properties"]["AutoDeploy"] is True
    # the pushers: the worker, ws and maintenance — ManageConnections on this stage's @connections only
    for name in FUNCTIONS:
        fid = function_id(t, name)
        env = t["Resources"][fid]["Properties"]["Environment"]["Variables"]
        grants = [s for s in role_statements(t, fid) if "execute-api:ManageConnections" in actions([s])]
        if name in ("worker", "ws", "maintenance"):
            assert "live" in json.dumps(env["TREADLE_WS_ENDPOINT"]) and api_id in json.dumps(env["TREADLE_WS_ENDPOINT"])
            [grant] = grants
            arn = json.dumps(grant["Resource"])
            assert api_id in arn and "/live/*/@connections/*" in arn, arn
            assert actions([grant]) == {"execute-api:ManageConnections"}
        else:
            assert not grants and "TREADLE_WS_ENDPOINT" not in env, name
    ws = t["Resources"][function_id(t, "ws")]["Properties"]
    [token_id] = [k for k in resources(t, "AWS::SecretsManager::Secret") if "ApiToken" in k]
    assert ws["Environment"]["Variables"]["TREADLE_API_TOKEN_SECRET_ARN"] == {"Ref": token_id}
    assert ws["Timeout"] == 30 and "SnapStart" in ws
    assert "sqs:SendMessage" not in actions(role_statements(t, function_id(t, "ws")))
    # API Gateway may invoke the alias
    perms = [r["Properties"] for r in resources(t, "AWS::Lambda::Permission").values()
             if r["Properties"]["FunctionName"] == entry_ref(t, "ws")]
    assert perms and all(p["Principal"] == "apigateway.amazonaws.com" for p in perms)
    assert "WebSocketUrl" in t["Outputs"]

    # -c websocket=false: no WebSocket API, no ws function, nobody may post to connections
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from treadle_infra import TreadleRuntimeProps, TreadleStack

    tmp = synth["tmp"]
    off = Template.from_stack(TreadleStack(cdk.App(), "NoWs", props=TreadleRuntimeProps(
        layer_dir=tmp / "layer", staging_dir=tmp / "app-nows", byte_compile=False, websocket=False))).to_json()
    assert not resources_of_protocol(off, "WEBSOCKET") and "WebSocketUrl" not in off["Outputs"]
    assert "functions.ws.handler.handler" not in {r["Properties"]["Handler"] for r in python_functions(off).values()}
    assert "ManageConnections" not in json.dumps(off) and "TREADLE_WS_ENDPOINT" not in json.dumps(off)


def resources_of_protocol(t: Mapping[str, Any], protocol: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in resources(t, "AWS::ApiGatewayV2::Api").items()
            if r["Properties"]["ProtocolType"] == protocol}


def test_reserved_concurrency_fits_the_connection_budget(synth: dict[str, Any]) -> None:
    t = synth["json"]
    reserved = {n: t["Resources"][function_id(t, n)]["Properties"]["ReservedConcurrentExecutions"]
                for n in FUNCTIONS}
    assert reserved == {"api": 20, "worker": 20, "webhook": 5, "mcp": 5, "stream": 20, "scheduler": 5,
                        "maintenance": 2, "migrate": 1, "ws": 10}
    pool = {t["Resources"][function_id(t, n)]["Properties"]["Environment"]["Variables"]["TREADLE_DB_POOL_SIZE"]
            for n in FUNCTIONS}
    assert pool == {"2"}
    # Aurora's max_connections at the 4-ACU maximum is 901; treadle may use 90% of it (each stream
    # environment also holds its live listener's connection)
    assert 2 * sum(reserved.values()) + reserved["stream"] <= int(0.9 * 901)
    [mapping] = resources(t, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] <= reserved["worker"]

    import aws_cdk as cdk

    from treadle_infra import TreadleRuntimeProps, TreadleStack

    tmp = synth["tmp"]
    too_many = TreadleRuntimeProps(layer_dir=tmp / "layer", staging_dir=tmp / "app-big", byte_compile=False,
                                   worker_max_concurrency=500)
    # the refusal names the knob an operator turns (-c db_max_acu), not the construct's field
    with pytest.raises(ValueError, match=r"could hold 1156 database connections .* over the budget of 810.*"
                                         r"raise db_max_acu"):
        TreadleStack(cdk.App(), "TooMany", props=too_many)
    # docs/deploy-aws.md states the reserved total wherever it names one (issue 43 item 8: it said 78)
    doc = DEPLOY_DOC.read_text()
    stated = [int(n) for pattern in (r"concurrency\s+\((\d+) by default\)", r"the reserved (\d+) plus",
                                     r"at most 2 \N{MULTIPLICATION SIGN} (\d+) =") for n in re.findall(pattern, doc)]
    assert len(stated) == 3 and set(stated) == {sum(reserved.values())}, stated


def test_the_layer_size_the_doc_states() -> None:
    """docs/deploy-aws.md's layer figure is the built layer's (issue 43 item 8: it said ~28 MB
    while the layer held ~77); checked where the layer is built (layers/build.py)."""
    layer = ROOT / "layers" / "build" / "layer"
    if not (layer / "python").is_dir():
        pytest.skip("the layer is not built here (.venv/bin/python layers/build.py)")
    source = sum(p.stat().st_size for p in layer.rglob("*") if p.is_file() and p.suffix != ".pyc")
    stated = re.search(r"from manylinux wheels \(~(\d+) MB, ~(\d+) MB zipped", DEPLOY_DOC.read_text())
    assert stated is not None
    assert abs(source / 2**20 - int(stated[1])) <= 0.15 * int(stated[1])


def test_memory_as_the_doc_states_it(synth: dict[str, Any]) -> None:
    """docs/deploy-aws.md "Memory and cost" states each function's memory and its measured peak:
    the stack gives what the table says, above the peak (issue 43 item 8)."""
    t = synth["json"]
    doc = DEPLOY_DOC.read_text().split("### Memory and cost", 1)[1].split("\n\n**Per million", 1)[0]
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+) \|$", doc, re.M)
    assert {name for name, _, _ in rows} == {"worker", "api", "webhook", "mcp", "scheduler", "maintenance"}
    for name, memory, peak in rows:
        assert t["Resources"][function_id(t, name)]["Properties"]["MemorySize"] == int(memory), name
        assert 3 * int(peak) <= int(memory), (name, peak, memory)


def test_proxy_pinning_and_the_database_parameters(synth: dict[str, Any]) -> None:
    """With the proxy the pools pin nothing (no server-side prepares, no startup options) and the
    idle-in-transaction limit is the server's; without it (the default) there is no proxy at all."""
    t, staging = synth["json"], synth["staging"]
    for name in FUNCTIONS:
        assert t["Resources"][function_id(t, name)]["Properties"]["Environment"]["Variables"][
            "TREADLE_DB_BEHIND_POOLER"] == "true"
        assert "TREADLE_DB_BEHIND_POOLER" not in staging["Resources"][function_id(staging, name)]["Properties"][
            "Environment"]["Variables"]
    assert not resources(staging, "AWS::RDS::DBProxy")
    [cluster] = resources(staging, "AWS::RDS::DBCluster").values()
    [params] = resources(staging, "AWS::RDS::DBClusterParameterGroup").values()
    assert params["Properties"]["Parameters"] == {"idle_in_transaction_session_timeout": "60000"}
    assert "Ref" in cluster["Properties"]["DBClusterParameterGroupName"]


#: names that must be unique in an account and region (left out, CloudFormation generates them)
UNIQUE_NAMES = {
    "AWS::RDS::DBProxy": "DBProxyName", "AWS::Scheduler::ScheduleGroup": "Name",
    "AWS::Lambda::Function": "FunctionName", "AWS::Logs::LogGroup": "LogGroupName", "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName", "AWS::IAM::Role": "RoleName", "AWS::SecretsManager::Secret": "Name",
    "AWS::RDS::DBCluster": "DBClusterIdentifier", "AWS::RDS::DBInstance": "DBInstanceIdentifier",
    "AWS::RDS::DBClusterParameterGroup": "DBClusterParameterGroupName", "AWS::Scheduler::Schedule": "Name",
    "AWS::EC2::SecurityGroup": "GroupName", "AWS::ApiGatewayV2::Api": "-",
}


def physical_names(t: Mapping[str, Any]) -> dict[str, str]:
    """The literal account-unique names a template gives its resources."""
    out = {}
    for rid, r in t["Resources"].items():
        value = r.get("Properties", {}).get(UNIQUE_NAMES.get(r["Type"], "-"))
        if value is not None:
            out[f"{r['Type']}={json.dumps(value)}"] = rid
    return out


def test_a_second_stack_beside_the_first_collides_on_no_name(synth: dict[str, Any]) -> None:
    prod, staging = physical_names(synth["json"]), physical_names(synth["staging"])
    assert 'AWS::RDS::DBProxy="Treadle-proxy"' in prod
    assert not set(prod) & set(staging), set(prod) & set(staging)
    assert any(k.startswith('AWS::Scheduler::ScheduleGroup="TreadleStaging-') for k in staging)


def test_cfn_lint_finds_no_errors(synth: dict[str, Any]) -> None:
    """Both stacks: with the proxy (Treadle) and with the defaults (TreadleStaging)."""
    paths = [synth["tmp"] / "Treadle.template.json", synth["tmp"] / "TreadleStaging.template.json"]
    paths[0].write_text(json.dumps(synth["json"]))
    paths[1].write_text(json.dumps(synth["staging"]))
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    proc = subprocess.run([str(cfn_lint), "--format", "json", *map(str, paths)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 4, 8, 12), proc.stderr  # bit 2: errors; 4: warnings; 8: informational
    findings = json.loads(proc.stdout or "[]")
    errors = [f for f in findings if f["Level"] == "Error"]
    assert errors == [], errors


def test_a_yaml_config_json_cannot_hold_stays_yaml(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle_infra.assets import config_as_json, stage_app_code, staged_config_name

    dated = CONFIG + "# a date JSON has no type for:\nchannels:\n  c:\n    description: 2026-11-21\n"
    assert config_as_json(dated) is None
    staged = stage_app_code(dated, tmp_path / "app")
    assert staged_config_name(staged) == "treadle.yaml" and not (staged / "treadle.json").exists()
    staged = stage_app_code(CONFIG, tmp_path / "app")
    assert staged_config_name(staged) == "treadle.json"


def test_layered_configs_ship_merged(tmp_path: Path) -> None:
    """`config=base.yaml:bundle.yaml` (loomcycle's layers): validated as one, shipped as one file
    that the functions load to the same configuration."""
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle.config import load_config, parse_config
    from treadle_infra.assets import validate_config

    base, bundle = tmp_path / "base.yaml", tmp_path / "bundle.yaml"
    base.write_text("tiers:\n  middle: [{provider: mock, model: echo}]\n")
    bundle.write_text("agents:\n  team/assistant: {tier: middle, skills: [team/*]}\n")
    layered = Path(f"{base}:{bundle}")
    shipped = validate_config(layered)
    assert shipped.startswith("# merged from ")
    assert parse_config(yaml.safe_load(shipped)).model_dump() == load_config(layered).model_dump()
    assert validate_config(base) == base.read_text()  # one file ships as it is


def test_staged_code_can_ship_hash_checked_bytecode(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle_infra.assets import stage_app_code, starter_config

    out = stage_app_code(starter_config(), tmp_path / "app", compile_with=sys.executable)
    tag = sys.implementation.cache_tag
    pyc = out / "treadle" / "__pycache__" / f"runtime.{tag}.pyc"
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b01  # hash-based, unchecked: independent of file times, so the asset hash is stable
    assert (out / "functions" / "worker" / "__pycache__" / f"handler.{tag}.pyc").is_file()


def test_stack_scoped_names() -> None:
    """Two stacks in one account and region get different proxy names (staging beside prod)."""
    sys.path.insert(0, str(ROOT / "infra"))
    from treadle_infra.runtime import proxy_name

    assert proxy_name("Treadle") != proxy_name("TreadleStaging")
    assert proxy_name("my_app.prod") == "my-app-prod-proxy" and proxy_name("9lives").startswith("t-")
    assert len(proxy_name("x" * 200)) <= 60

