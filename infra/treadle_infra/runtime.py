"""`TreadleRuntime`: treadle's cloud shape as one reusable construct.

    HTTP API ──► api / webhook / mcp functions ──┐
    function URL (RESPONSE_STREAM) ──► stream ───┤
    WebSocket API ──► ws ($connect, subscribe) ──┤   worker, ws, maintenance ──► @connections (push)
                                                 ├──► (RDS Proxy) ──► Aurora PostgreSQL Serverless v2 (pgvector)
    SQS step queue ──► worker function ──────────┤
        └─► dead-letter queue ──► alarm ──► SNS  │
    EventBridge Scheduler ─► maintenance (every minute), scheduler (per schedule)
    deploy ──► Migrations custom resource ──► migrate function (before any new version is served)

Every function runs in the VPC's private subnets, reads the database credentials, the API token and
(the worker only) the provider keys from Secrets Manager, and may send to the step queue. Nothing
else is granted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Aws, CfnOutput, CustomResource, Duration, RemovalPolicy, SecretValue, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as sns_subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import custom_resources as cr
from constructs import Construct

from treadle_infra.assets import (
    DEFAULT_LAYER_DIR,
    DEFAULT_STAGING_DIR,
    ROOT,
    check_layer_dir,
    require_interpreter,
    stage_app_code,
    staged_config_name,
    starter_config,
    validate_config,
)

DB_NAME = "treadle"
DB_USER = "treadle"
#: the functions' EMF metrics (cloud/treadle_cloud/metrics.py: its defaults, set explicitly below)
METRICS_NAMESPACE = "treadle"
SERVICE_NAME = "treadle"
#: the step queue's redrive threshold (the engine fails a run after 5 crashed steps on its own)
MAX_RECEIVE_COUNT = 10
#: the Lambda Web Adapter's publisher account (its layers are public, one per region)
LWA_ACCOUNT = "753240598075"


def migrations_digest() -> str:
    """A hash of every migration file: a deploy that ships a new migration updates the custom
    resource, which runs the migrate function again."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "core" / "treadle" / "store" / "migrations").glob("*.sql")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def aurora_max_connections(max_acu: float) -> int:
    """Aurora PostgreSQL's default max_connections, LEAST(DBInstanceClassMemory/9531392, 5000);
    for Serverless v2 the memory is that of the maximum capacity (2 GiB per ACU)."""
    return min(int(max_acu * 2 * 1024**3 / 9531392), 5000)


def proxy_name(stack_name: str) -> str:
    """An RDS Proxy name unique to the stack: letters, digits and single hyphens, starting with a
    letter, at most 60 characters."""
    cleaned = "-".join(part for part in "".join(c if c.isalnum() else "-" for c in stack_name).split("-") if part)
    name = f"{cleaned or 'treadle'}-proxy"
    if not name[0].isalpha():
        name = f"t-{name}"
    return name[:60].rstrip("-")


@dataclass
class TreadleRuntimeProps:
    #: an existing VPC (private subnets with egress + isolated subnets); else one is created
    vpc: ec2.IVpc | None = None
    nat_gateways: int = 1
    #: operator YAML shipped with the functions; None = the starter (mock agents)
    config_file: Path | None = None
    #: directory holding `python/` (layers/build.py's output)
    layer_dir: Path = DEFAULT_LAYER_DIR
    #: where the application code is staged for its asset
    staging_dir: Path | None = None
    #: byte-compile the staged code with an interpreter of the runtime's version (synth fails
    #: when there is none: uncompiled code is compiled again at every cold start)
    byte_compile: bool = True
    architecture: lambda_.Architecture = field(default_factory=lambda: lambda_.Architecture.X86_64)
    python_runtime: lambda_.Runtime = field(default_factory=lambda: lambda_.Runtime.PYTHON_3_12)
    db_engine_version: rds.AuroraPostgresEngineVersion = field(
        default_factory=lambda: rds.AuroraPostgresEngineVersion.VER_17_5
    )
    db_min_capacity: float = 0.5
    db_max_capacity: float = 4
    db_removal_policy: RemovalPolicy = RemovalPolicy.SNAPSHOT
    db_deletion_protection: bool = False
    #: connect through RDS Proxy. Off by default: the functions' reserved concurrency times their
    #: pool size is held under the database's max_connections (checked at synth), so a small
    #: deployment does not need the proxy's pooling (~$88/month). On for large fleets; then
    #: the pools prepare nothing server-side and send no session options (nothing pins).
    rds_proxy: bool = False
    #: Lambda's maximum: a step's model call may take minutes, and a call that still cannot
    #: finish is handed back at the deadline (treadle_cloud/deadline.py). Billing is per use.
    worker_timeout: Duration = field(default_factory=lambda: Duration.minutes(15))
    #: sized from the measured peak (~80 MB resident after a step under AWS's runtime interface
    #: client, scripts/coldstart.py --ric; docs/deploy-aws.md "Memory and cost"): 512 MB holds six
    #: times that; a step mostly waits on its model, and the wait is billed per GB-second
    worker_memory_mb: int = 512
    #: one record per invocation: records of a batch run one after another, so a batch of 5
    #: made the 5th run wait for four others' model calls; parallelism comes from concurrency
    worker_batch_size: int = 1
    worker_max_concurrency: int = 20
    #: the api function's peak is ~90 MB (as the worker's, measured): 512 MB
    api_memory_mb: int = 512
    #: database connections per execution environment (TREADLE_DB_POOL_SIZE)
    db_pool_size: int = 2
    #: reserve concurrency per function (needs an account concurrency quota with room: a new
    #: account's quota of 10 has none; False lets the functions share the unreserved pool)
    reserved_concurrency: bool = True
    #: concurrent environments per function: the database connection budget is checked against them
    concurrency: dict[str, int] = field(default_factory=lambda: {
        "api": 20, "webhook": 5, "mcp": 5, "stream": 20, "scheduler": 5, "maintenance": 2, "migrate": 1, "ws": 10,
    })
    #: the database's max_connections (default: Aurora's formula at db_max_capacity); treadle's
    #: functions may use at most 90% of it (the rest: operators, Aurora's own)
    db_max_connections: int | None = None
    #: fail the deploy when pgvector cannot be installed (vector Memory would be unavailable)
    require_pgvector: bool = True
    #: the stream function (a RESPONSE_STREAM function URL through the Lambda Web Adapter)
    stream: bool = True
    stream_timeout: Duration = field(default_factory=lambda: Duration.minutes(15))
    #: live text deltas to the stream function's readers: the worker NOTIFYs, each stream
    #: environment LISTENs on one connection of its own (treadle_cloud/live.py) — always straight
    #: to Aurora, never through RDS Proxy (a LISTEN session would pin a proxy connection)
    live_deltas: bool = True
    #: watchers without a Lambda each: an API Gateway WebSocket API whose `ws` function answers
    #: $connect / subscribe / $disconnect, and the worker (and maintenance) push runs' events to
    #: its connections (treadle_cloud/wswatch.py)
    websocket: bool = True
    #: the Lambda Web Adapter layer version (pinned: a new adapter is a deliberate upgrade)
    lwa_layer_version: int = 25
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    #: an address subscribed to the alarm topic
    alarm_email: str | None = None
    #: seconds an SSE response may last (HTTP API integrations end at 30 s)
    sse_budget_seconds: int = 25
    #: Lambda SnapStart (Python 3.12+): each deploy publishes a version whose initialized
    #: environment (every import done) is snapshotted; a cold start restores it instead of
    #: importing again. Everything invokes the `live` alias of that version.
    snap_start: bool = True


class TreadleRuntime(Construct):
    def __init__(self, scope: Construct, construct_id: str, props: TreadleRuntimeProps | None = None) -> None:
        super().__init__(scope, construct_id)
        p = props or TreadleRuntimeProps()
        self.props = p

        # -- network ------------------------------------------------------------------------------
        self.vpc = p.vpc or ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=p.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(
                    name="app", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
                ),
                ec2.SubnetConfiguration(name="data", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24),
            ],
        )
        app_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        # the agents' volumes (docs/workspace.md): S3 prefixes per tenant and volume, reached through
        # a gateway endpoint (no NAT traffic); kept on `cdk destroy` (it holds the agents' files)
        self.vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
        self.volumes_bucket = s3.Bucket(
            self, "Volumes", encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL, enforce_ssl=True, versioned=False,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # bodies over Lambda's 6 MB payload limit (large snapshot exports and restores:
        # treadle_cloud/transfers.py): short-lived objects, gone after a day
        self.transfers_bucket = s3.Bucket(
            self, "Transfers", encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL, enforce_ssl=True, versioned=False,
            removal_policy=RemovalPolicy.DESTROY, auto_delete_objects=False,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(1))],
        )
        self.functions_sg = ec2.SecurityGroup(
            self, "FunctionsSecurityGroup", vpc=self.vpc, description="treadle functions", allow_all_outbound=True
        )

        # -- database -----------------------------------------------------------------------------
        self.check_connection_budget()
        engine = rds.DatabaseClusterEngine.aurora_postgres(version=p.db_engine_version)
        self.database = rds.DatabaseCluster(
            self,
            "Database",
            engine=engine,
            # a session idle inside a transaction this long is ended (a frozen or killed function
            # would hold its locks): what the sidecar sets at connect, server-wide here (a
            # startup option would pin RDS Proxy connections)
            parameter_group=rds.ParameterGroup(
                self, "DatabaseParameters", engine=engine,
                description="treadle: Aurora PostgreSQL cluster parameters",
                parameters={"idle_in_transaction_session_timeout": "60000"},
            ),
            writer=rds.ClusterInstance.serverless_v2("Writer", publicly_accessible=False),
            serverless_v2_min_capacity=p.db_min_capacity,
            serverless_v2_max_capacity=p.db_max_capacity,
            credentials=rds.Credentials.from_generated_secret(DB_USER),
            default_database_name=DB_NAME,
            vpc=self.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED),
            storage_encrypted=True,
            backup=rds.BackupProps(retention=Duration.days(7)),
            removal_policy=p.db_removal_policy,
            deletion_protection=p.db_deletion_protection,
            iam_authentication=False,
        )
        assert self.database.secret is not None
        self.db_secret = self.database.secret
        self.proxy: rds.DatabaseProxy | None = None
        if p.rds_proxy:
            self.proxy = self.database.add_proxy(
                "Proxy",
                # the default name is the construct id, the same in every stack: a second stack (staging
                # beside prod) or a replaced proxy would collide; the stack's name makes it unique
                db_proxy_name=proxy_name(Stack.of(self).stack_name),
                secrets=[self.db_secret],
                vpc=self.vpc,
                vpc_subnets=app_subnets,
                require_tls=True,
                idle_client_timeout=Duration.minutes(15),
                # room for operators and Aurora's own connections
                max_connections_percent=90,
            )
            self.database.connections.allow_default_port_from(self.proxy, "RDS Proxy to Aurora")
            self.proxy.connections.allow_from(self.functions_sg, ec2.Port.tcp(5432), "treadle functions to RDS Proxy")
            db_host = self.proxy.endpoint
        else:
            self.database.connections.allow_default_port_from(self.functions_sg, "treadle functions to Aurora")
            db_host = self.database.cluster_endpoint.hostname

        # -- secrets ------------------------------------------------------------------------------
        self.api_token = secretsmanager.Secret(
            self,
            "ApiToken",
            description="treadle API bearer token (Authorization: Bearer <token>)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                exclude_punctuation=True, password_length=48
            ),
        )
        self.provider_keys = secretsmanager.Secret(
            self,
            "ProviderKeys",
            description='treadle model provider keys, a JSON object: {"ANTHROPIC_API_KEY": "...", ...}',
            secret_string_value=SecretValue.unsafe_plain_text("{}"),
        )
        self.webhook_secrets = secretsmanager.Secret(
            self,
            "WebhookSecrets",
            description='treadle webhook signing secrets, a JSON object: {"GITHUB_WEBHOOK_SECRET": "...", ...}',
            secret_string_value=SecretValue.unsafe_plain_text("{}"),
        )

        # -- queues -------------------------------------------------------------------------------
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.queue = sqs.Queue(
            self,
            "StepQueue",
            # AWS's guidance for an event source mapping: six times the function timeout. A dead
            # worker's run does not wait for it: its lease expires and the maintenance sweep
            # re-enqueues the step.
            visibility_timeout=Duration.seconds(6 * p.worker_timeout.to_seconds()),
            retention_period=Duration.days(4),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=MAX_RECEIVE_COUNT, queue=self.dead_letter_queue),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )

        # -- schedules ----------------------------------------------------------------------------
        # destroyed with the stack (the default keeps it, and its schedules would go on firing at a
        # deleted target while a redeploy fails on the leftover group)
        self.schedule_group = scheduler.ScheduleGroup(self, "ScheduleGroup", removal_policy=RemovalPolicy.DESTROY)

        # -- code ---------------------------------------------------------------------------------
        config_yaml = validate_config(p.config_file) if p.config_file else starter_config()
        version = p.python_runtime.name.removeprefix("python")
        compile_with = require_interpreter(version) if p.byte_compile else None
        staged = stage_app_code(config_yaml, p.staging_dir or DEFAULT_STAGING_DIR, compile_with=compile_with)
        self.code = lambda_.Code.from_asset(str(staged))
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            code=lambda_.Code.from_asset(str(check_layer_dir(p.layer_dir))),
            compatible_runtimes=[p.python_runtime],
            compatible_architectures=[p.architecture],
            description="treadle's third-party dependencies (layers/build.py)",
        )

        common_env = {
            "TREADLE_QUEUE_URL": self.queue.queue_url,
            "TREADLE_DB_SECRET_ARN": self.db_secret.secret_arn,
            "TREADLE_DB_HOST": db_host,
            "TREADLE_DB_NAME": DB_NAME,
            "TREADLE_DB_SSLMODE": "require",
            "TREADLE_DB_POOL_SIZE": str(p.db_pool_size),
            "TREADLE_CONFIG": f"/var/task/{staged_config_name(staged)}",
            "TREADLE_HOME": "/tmp/treadle",
            "TREADLE_VOLUMES_BUCKET": self.volumes_bucket.bucket_name,
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            # no pydantic plugins are installed: skip the entry-point scan at the first model build
            "PYDANTIC_DISABLE_PLUGINS": "__all__",
        }
        if p.rds_proxy:
            common_env["TREADLE_DB_BEHIND_POOLER"] = "true"  # nothing that pins a proxy connection
        common_env["TREADLE_LIVE_DELTAS"] = "true" if p.stream and p.live_deltas else "false"

        #: function name → what its trigger invokes (the `live` alias with SnapStart)
        self.entry: dict[str, lambda_.IFunction] = {}

        def function(name: str, description: str, *, timeout: Duration, memory_mb: int = 512,
                     env: dict[str, str] | None = None, snap_start: bool = p.snap_start,
                     handler: str | None = None, extra_layers: list[lambda_.ILayerVersion] | None = None,
                     sends_steps: bool = True) -> lambda_.Function:
            title = name.capitalize()
            log_group = logs.LogGroup(
                self, f"{title}Logs", retention=p.log_retention, removal_policy=RemovalPolicy.DESTROY
            )
            fn = lambda_.Function(
                self,
                f"{title}Function",
                description=description,
                runtime=p.python_runtime,
                architecture=p.architecture,
                handler=handler or f"functions.{name}.handler.handler",
                code=self.code,
                layers=[self.layer, *(extra_layers or [])],
                memory_size=memory_mb,
                timeout=timeout,
                vpc=self.vpc,
                vpc_subnets=app_subnets,
                security_groups=[self.functions_sg],
                environment={**common_env, **(env or {})},
                log_group=log_group,
                logging_format=lambda_.LoggingFormat.JSON,
                application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
                system_log_level_v2=lambda_.SystemLogLevel.WARN,
                snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if snap_start else None,
                reserved_concurrent_executions=self.concurrency(name) if p.reserved_concurrency else None,
            )
            self.db_secret.grant_read(fn)
            if sends_steps:
                self.queue.grant_send_messages(fn)
            # what triggers invoke: the SnapStart version's alias (a snapshot only serves
            # published versions), else the function itself
            self.entry[name] = (
                lambda_.Alias(self, f"{title}Live", alias_name="live", version=fn.current_version)
                if snap_start else fn
            )
            self.functions[name] = fn
            return fn

        self.functions: dict[str, lambda_.Function] = {}

        # -- deploy-time migrations ---------------------------------------------------------------
        # CDK's Provider framework invokes the migrate function synchronously on every deploy
        # that changes the migrations (and on the first): a FAIL (a migration error, no pgvector
        # when required, an unreachable database) fails the deploy, which rolls back — before any
        # function's new version is served (every alias below depends on it).
        self.migrate_function = function(
            "migrate", "treadle: migrations at deploy time; the operator's doctor ({\"action\": \"doctor\"})",
            timeout=Duration.minutes(5), snap_start=False, sends_steps=False,
            env={"TREADLE_REQUIRE_PGVECTOR": str(p.require_pgvector).lower()},
        )
        provider = cr.Provider(
            self, "MigrationsProvider", on_event_handler=self.migrate_function,
            log_group=logs.LogGroup(self, "MigrationsProviderLogs", retention=p.log_retention,
                                    removal_policy=RemovalPolicy.DESTROY),
        )
        self.migrations = CustomResource(
            self, "Migrations", service_token=provider.service_token, resource_type="Custom::TreadleMigrations",
            properties={"Migrations": migrations_digest(), "RequirePgvector": str(p.require_pgvector).lower()},
        )
        self.migrations.node.add_dependency(self.database)
        if self.proxy is not None:
            self.migrations.node.add_dependency(self.proxy)

        http_env = {
            "TREADLE_API_TOKEN_SECRET_ARN": self.api_token.secret_arn,
            "TREADLE_SSE_BUDGET_SECONDS": str(p.sse_budget_seconds),
        }
        self.scheduler_function = function(
            "scheduler", "treadle: EventBridge Scheduler target (fires a schedule by id)", timeout=Duration.seconds(30)
        )
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            description="Assumed by EventBridge Scheduler to fire treadle's schedules",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}
            ),
        )
        self.entry["scheduler"].grant_invoke(self.scheduler_role)

        schedule_env = {
            "TREADLE_SCHEDULE_GROUP": self.schedule_group.schedule_group_name,
            "TREADLE_SCHEDULER_ROLE_ARN": self.scheduler_role.role_arn,
            "TREADLE_SCHEDULER_TARGET_ARN": self.entry["scheduler"].function_arn,
        }
        self.api_function = function(
            "api",
            "treadle: HTTP API (runs, events, stream)",
            timeout=Duration.seconds(30),
            memory_mb=p.api_memory_mb,
            env={**http_env, **schedule_env},
        )
        self.webhook_function = function(
            "webhook", "treadle: inbound webhooks", timeout=Duration.seconds(30),
            env={**http_env, "TREADLE_WEBHOOK_SECRETS_SECRET_ARN": self.webhook_secrets.secret_arn},
        )
        self.webhook_secrets.grant_read(self.webhook_function)
        self.mcp_function = function("mcp", "treadle: MCP over Streamable HTTP", timeout=Duration.seconds(30),
                                     env=http_env)
        for fn in (self.api_function, self.webhook_function, self.mcp_function):
            self.api_token.grant_read(fn)

        self.worker_function = function(
            "worker",
            "treadle: one loop iteration per SQS message",
            timeout=p.worker_timeout,
            memory_mb=p.worker_memory_mb,
            env={"TREADLE_PROVIDER_KEYS_SECRET_ARN": self.provider_keys.secret_arn},
        )
        self.provider_keys.grant_read(self.worker_function)
        self.volumes_bucket.grant_read_write(self.worker_function)  # the file tools
        self.entry["worker"].add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=p.worker_batch_size,
                report_batch_item_failures=True,
                max_concurrency=p.worker_max_concurrency,
            )
        )

        # -- the stream function -------------------------------------------------------------------
        self.stream_function: lambda_.Function | None = None
        self.stream_url: lambda_.FunctionUrl | None = None
        if p.stream:
            arch = "Arm64" if p.architecture.name == "arm64" else "X86"
            adapter = lambda_.LayerVersion.from_layer_version_arn(
                self, "WebAdapter",
                f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{LWA_ACCOUNT}:layer:LambdaAdapterLayer{arch}:"
                f"{p.lwa_layer_version}",
            )
            self.stream_function = function(
                "stream", "treadle: a run's events as they commit (function URL, response streaming)",
                timeout=p.stream_timeout, snap_start=False, handler="functions/stream/run.sh",
                extra_layers=[adapter],
                env={
                    **http_env,
                    # ends cleanly (the client resumes from its last id) before Lambda cuts it
                    "TREADLE_SSE_BUDGET_SECONDS": str(int(p.stream_timeout.to_seconds()) - 30),
                    "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
                    "AWS_LWA_INVOKE_MODE": "response_stream",
                    "AWS_LWA_PORT": "8080",
                    "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
                    # the live listener's session connects to Aurora itself, past the proxy
                    **({"TREADLE_LIVE_DB_HOST": self.database.cluster_endpoint.hostname}
                       if self.proxy is not None and p.live_deltas else {}),
                },
            )
            if self.proxy is not None and p.live_deltas:
                self.database.connections.allow_default_port_from(
                    self.functions_sg, "the stream function's live listener to Aurora (past RDS Proxy)")
            self.api_token.grant_read(self.stream_function)
            # the API's bearer token is the auth (every /v1 route checks it), as behind the HTTP API
            self.stream_url = self.stream_function.add_function_url(
                auth_type=lambda_.FunctionUrlAuthType.NONE, invoke_mode=lambda_.InvokeMode.RESPONSE_STREAM,
            )


        # -- WebSocket watchers (no Lambda held per watcher) ------------------------------------------
        self.ws_api: apigw.WebSocketApi | None = None
        self.ws_stage: apigw.WebSocketStage | None = None
        self.ws_function: lambda_.Function | None = None
        if p.websocket:
            self.ws_function = function(
                "ws", "treadle: WebSocket watchers ($connect auth, subscribe with replay, $disconnect)",
                timeout=Duration.seconds(30), env=http_env, sends_steps=False,
            )
            self.api_token.grant_read(self.ws_function)  # $connect checks the API's bearer

            def route(title: str) -> apigw.WebSocketRouteOptions:
                return apigw.WebSocketRouteOptions(
                    integration=integrations.WebSocketLambdaIntegration(f"Ws{title}Integration", self.entry["ws"]))

            self.ws_api = apigw.WebSocketApi(
                self, "WebSocketApi", description="treadle: run events pushed to watchers",
                route_selection_expression="$request.body.action",
                connect_route_options=route("Connect"), disconnect_route_options=route("Disconnect"),
                default_route_options=route("Default"),
            )
            for action in ("subscribe", "unsubscribe"):
                self.ws_api.add_route(action, integration=integrations.WebSocketLambdaIntegration(
                    f"Ws{action.capitalize()}Integration", self.entry["ws"]))
            self.ws_stage = apigw.WebSocketStage(self, "WebSocketStage", web_socket_api=self.ws_api,
                                                 stage_name="live", auto_deploy=True)

        self.maintenance_function = function(
            "maintenance", "treadle: re-enqueue expired leases and due steps, reconcile schedules (every minute)",
            timeout=Duration.seconds(60),
            env=schedule_env,
        )
        # VolumeDef purge (api) and the purge of ephemeral volumes a crashed run left (maintenance)
        for fn in (self.api_function, self.maintenance_function):
            self.volumes_bucket.grant_read_write(fn)
        # the api function's large answers and uploaded request bodies (presigned URLs it signs)
        self.transfers_bucket.grant_read_write(self.api_function)
        self.api_function.add_environment("TREADLE_TRANSFERS_BUCKET", self.transfers_bucket.bucket_name)

        if self.ws_stage is not None:
            # who pushes: the worker (its relay's flush), the ws function (a subscribe's replay),
            # maintenance (catch-up, keepalives) — execute-api:ManageConnections on this stage only
            for fn in (self.worker_function, self.ws_function, self.maintenance_function):
                assert fn is not None
                fn.add_environment("TREADLE_WS_ENDPOINT", self.ws_stage.callback_url)
                self.ws_stage.grant_management_api_access(fn)

        # no function's new version is served before the deploy's migrations succeeded
        for name, target in self.entry.items():
            if name != "migrate":
                target.node.add_dependency(self.migrations)

        # -- failed asynchronous invocations -----------------------------------------------------
        # EventBridge Scheduler invokes maintenance and scheduler asynchronously: an invocation
        # that fails (after Lambda's retries) lands here, with its error, instead of vanishing
        self.failed_invocations = sqs.Queue(
            self, "FailedInvocations", retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
        )
        failure = destinations.SqsDestination(self.failed_invocations)
        self.entry["maintenance"].configure_async_invoke(  # the next minute's run retries anyway
            on_failure=failure, retry_attempts=0, max_event_age=Duration.minutes(2))
        self.entry["scheduler"].configure_async_invoke(  # a fire is recorded once: retries are safe
            on_failure=failure, retry_attempts=2, max_event_age=Duration.hours(1))

        # The API (ScheduleDef ops) and maintenance (reconciling retired / yaml schedules every minute)
        # manage the schedules of the group and pass them the role; nobody else does.
        manage_schedules = iam.PolicyStatement(
            actions=[
                "scheduler:CreateSchedule",
                "scheduler:UpdateSchedule",
                "scheduler:DeleteSchedule",
                "scheduler:GetSchedule",
            ],
            resources=[
                Stack.of(self).format_arn(
                    service="scheduler",
                    resource="schedule",
                    resource_name=f"{self.schedule_group.schedule_group_name}/*",
                )
            ],
        )
        for fn in (self.api_function, self.maintenance_function):
            fn.add_to_role_policy(manage_schedules)
            self.scheduler_role.grant_pass_role(fn.grant_principal)

        self.maintenance_schedule = scheduler.Schedule(
            self,
            "MaintenanceSchedule",
            description="treadle maintenance: sweep expired leases and due steps",
            schedule=scheduler.ScheduleExpression.rate(Duration.minutes(1)),
            schedule_group=self.schedule_group,
            target=scheduler_targets.LambdaInvoke(
                self.entry["maintenance"],
                input=scheduler.ScheduleTargetInput.from_object({"source": "treadle.maintenance"}),
                retry_attempts=0,
                max_event_age=Duration.minutes(1),
                dead_letter_queue=self.failed_invocations,  # Scheduler could not invoke at all
            ),
        )

        # -- HTTP API -----------------------------------------------------------------------------
        self.http_api = apigw.HttpApi(self, "HttpApi", description="treadle HTTP API")
        # access logs: one JSON line per request (who, what, status, latency, integration error)
        self.access_logs = logs.LogGroup(self, "ApiAccessLogs", retention=p.log_retention,
                                         removal_policy=RemovalPolicy.DESTROY)
        stage = self.http_api.default_stage
        assert stage is not None
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        cfn_stage.access_log_settings = apigw.CfnStage.AccessLogSettingsProperty(
            destination_arn=self.access_logs.log_group_arn,
            format=json.dumps({
                "requestId": "$context.requestId", "ip": "$context.identity.sourceIp",
                "time": "$context.requestTime", "method": "$context.httpMethod", "path": "$context.path",
                "status": "$context.status", "bytes": "$context.responseLength",
                "latencyMs": "$context.responseLatency", "integrationStatus": "$context.integrationStatus",
                "integrationError": "$context.integrationErrorMessage",
            }),
        )
        routes = [
            ("/{proxy+}", self.entry["api"], "Api"),
            ("/v1/_webhooks/{proxy+}", self.entry["webhook"], "Webhook"),
            ("/v1/_mcp", self.entry["mcp"], "Mcp"),
            ("/mcp", self.entry["mcp"], "McpShort"),  # the path the MCP Inspector insists on
        ]
        by_fn: dict[str, integrations.HttpLambdaIntegration] = {}  # /mcp shares /v1/_mcp's integration
        for path, fn, title in routes:
            key = fn.node.path
            if key not in by_fn:
                by_fn[key] = integrations.HttpLambdaIntegration(f"{title}Integration", fn)
            self.http_api.add_routes(path=path, methods=[apigw.HttpMethod.ANY], integration=by_fn[key])

        # (the WebSocket stage has no access logs: a WebSocket API logs only where the account's
        # API Gateway CloudWatch role is set — an account-wide setting a stack should not own)

        # -- alarms -------------------------------------------------------------------------------
        self.alarm_topic = sns.Topic(self, "AlarmTopic", display_name="treadle alarms", enforce_ssl=True)
        if p.alarm_email:
            self.alarm_topic.add_subscription(sns_subscriptions.EmailSubscription(p.alarm_email))
        self.dlq_alarm = cloudwatch.Alarm(
            self,
            "DeadLetterAlarm",
            alarm_description="treadle: step messages reached the dead-letter queue",
            metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(1), statistic="Maximum"
            ),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.backlog_alarm = cloudwatch.Alarm(
            self,
            "QueueBacklogAlarm",
            alarm_description="treadle: the oldest step message waited more than 5 minutes",
            metric=self.queue.metric_approximate_age_of_oldest_message(
                period=Duration.minutes(1), statistic="Maximum"
            ),
            threshold=300,
            evaluation_periods=5,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.alarms = [self.dlq_alarm, self.backlog_alarm, *self._more_alarms()]
        for alarm in self.alarms:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.alarm_topic))

    def _more_alarms(self) -> list[cloudwatch.Alarm]:
        def alarm(cid: str, description: str, metric: cloudwatch.IMetric, threshold: float, *,
                  periods: int = 1, datapoints: int | None = None) -> cloudwatch.Alarm:
            return cloudwatch.Alarm(
                self, cid, alarm_description=f"treadle: {description}", metric=metric, threshold=threshold,
                evaluation_periods=periods, datapoints_to_alarm=datapoints,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )

        five = Duration.minutes(5)
        out = [
            # the recovery path (expired leases, lost messages, timers): two failed minutes of three
            alarm("MaintenanceErrorsAlarm", "the maintenance function fails (expired leases are not re-enqueued)",
                  self.maintenance_function.metric_errors(period=Duration.minutes(1), statistic="Sum"), 1,
                  periods=3, datapoints=2),
            alarm("WorkerErrorsAlarm", "worker invocations fail (5 or more in 5 minutes)",
                  self.worker_function.metric_errors(period=five, statistic="Sum"), 5),
            alarm("WorkerThrottlesAlarm", "worker invocations are throttled (reserved concurrency reached)",
                  self.worker_function.metric_throttles(period=five, statistic="Sum"), 1),
            alarm("Api5xxAlarm", "the HTTP API answers 5xx (5 or more in 5 minutes)",
                  self.http_api.metric_server_error(period=five, statistic="Sum"), 5),
            alarm("FailedInvocationsAlarm", "an asynchronous invocation (maintenance, a schedule) failed",
                  self.failed_invocations.metric_approximate_number_of_messages_visible(
                      period=Duration.minutes(1), statistic="Maximum"), 1),
            # near the ceiling for 15 minutes: raise db_max_acu (and with it max_connections)
            alarm("DatabaseCapacityAlarm", "Aurora runs at 90% or more of its maximum capacity",
                  self.database.metric("ACUUtilization", period=five, statistic="Average"), 90, periods=3),
            alarm("DatabaseConnectionsAlarm", "database connections reach 80% of the budget",
                  self.database.metric_database_connections(period=five, statistic="Maximum"),
                  int(0.8 * self.connection_budget())),
        ]
        # the runs themselves: half or more of the runs that ended in 5 minutes failed (3 at least), from
        # the workers' EMF `RunsFinished{status}` (telemetry/metrics.py) — every run failing moves no
        # Lambda error (a failed run is a handled outcome)
        def runs(status: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(namespace=METRICS_NAMESPACE, metric_name="RunsFinished", period=five,
                                     statistic="Sum", dimensions_map={"service": SERVICE_NAME, "status": status})

        failed_rate = cloudwatch.MathExpression(
            expression="IF(FILL(f, 0) >= 3, 100 * FILL(f, 0) / (FILL(c, 0) + FILL(f, 0) + FILL(x, 0)), 0)",
            using_metrics={"f": runs("failed"), "c": runs("completed"), "x": runs("cancelled")},
            label="failed runs (% of the runs that ended)", period=five)
        out.append(alarm("FailedRunsAlarm", "half or more of the runs that ended in 5 minutes failed",
                         failed_rate, 50))
        # the recovery path stopped: no maintenance invocation for 5 minutes (missing data is breaching)
        out.append(cloudwatch.Alarm(
            self, "MaintenanceStoppedAlarm",
            alarm_description="treadle: the maintenance function has not run for 5 minutes (expired leases, "
                              "lost messages and timers are not handled)",
            metric=self.maintenance_function.metric_invocations(period=five, statistic="Sum"), threshold=1,
            evaluation_periods=1, comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        ))
        if self.stream_function is not None:
            out.append(alarm("StreamThrottlesAlarm", "stream watchers are throttled (reserved concurrency reached)",
                             self.stream_function.metric_throttles(period=five, statistic="Sum"), 1))
        return out

    # -- connections -------------------------------------------------------------------------------

    def concurrency(self, name: str) -> int:
        if name == "worker":
            return self.props.worker_max_concurrency
        return self.props.concurrency[name]

    def connection_budget(self) -> int:
        """Connections treadle's functions may hold: 90% of the database's max_connections."""
        p = self.props
        return int(0.9 * (p.db_max_connections or aurora_max_connections(p.db_max_capacity)))

    def connections_needed(self) -> int:
        """Every function at its concurrency, each environment with a full pool (and each stream
        environment with its live listener's connection)."""
        p = self.props
        optional = {"stream": p.stream, "ws": p.websocket}
        names = ["worker", *(n for n in p.concurrency if optional.get(n, True))]
        listeners = self.concurrency("stream") if p.stream and p.live_deltas else 0
        return p.db_pool_size * sum(self.concurrency(n) for n in names) + listeners

    def check_connection_budget(self) -> None:
        """Refuse (at synth) a configuration whose functions could open more connections than the
        database accepts — with reserved concurrency that bound is real; without, it is the goal."""
        needed, budget = self.connections_needed(), self.connection_budget()
        if needed > budget:
            raise ValueError(
                f"treadle's functions could hold {needed} database connections (pool size "
                f"{self.props.db_pool_size} x concurrency, + 1 per stream environment with live deltas), "
                f"over the budget of {budget} (90% of max_connections at "
                f"{self.props.db_max_capacity} ACU): lower the concurrency, or raise db_max_acu "
                f"(-c db_max_acu=N; db_max_capacity in TreadleRuntimeProps)"
            )

    def add_outputs(self, scope: Construct) -> None:
        outputs = {
            "ApiUrl": (self.http_api.api_endpoint, "the treadle HTTP API"),
            "QueueUrl": (self.queue.queue_url, "the step queue"),
            "DeadLetterQueueUrl": (self.dead_letter_queue.queue_url, "step messages that kept failing"),
            "ApiTokenSecretArn": (self.api_token.secret_arn, "the API bearer token"),
            "ProviderKeysSecretArn": (self.provider_keys.secret_arn, "JSON object of provider API keys"),
            "WebhookSecretsSecretArn": (self.webhook_secrets.secret_arn, "JSON object of webhook signing secrets"),
            "AlarmTopicArn": (self.alarm_topic.topic_arn, "subscribe to get treadle's alarms"),
            "ScheduleGroupName": (self.schedule_group.schedule_group_name, "EventBridge Scheduler group"),
            "MigrateFunctionName": (self.migrate_function.function_name,
                                    "migrations and the doctor: python -m treadle_cloud.doctor --stack NAME"),
            "FailedInvocationsQueueUrl": (self.failed_invocations.queue_url, "failed asynchronous invocations"),
            "AccessLogGroup": (self.access_logs.log_group_name, "the HTTP API's access logs"),
        }
        if self.ws_stage is not None:
            outputs["WebSocketUrl"] = (self.ws_stage.url, 'wss: connect with the API token, send'
                                       ' {"action": "subscribe", "run_id": ..., "from_seq": 0}')
        if self.stream_url is not None:
            outputs["StreamUrl"] = (self.stream_url.url, "GET {StreamUrl}v1/runs/{id}/stream: events as they commit")
        for name, (value, description) in outputs.items():
            CfnOutput(scope, name, value=value, description=description)
