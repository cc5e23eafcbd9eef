"""`TreadleRuntime`: treadle's cloud shape as one reusable construct.

    HTTP API ──► api / webhook / mcp functions ──┐
                                                 ├──► RDS Proxy ──► Aurora PostgreSQL Serverless v2 (pgvector)
    SQS step queue ──► worker function ──────────┤
        └─► dead-letter queue ──► alarm ──► SNS  │
    EventBridge Scheduler ─► maintenance (every minute), scheduler (per schedule)

Every function runs in the VPC's private subnets, reads the database credentials, the API token and
(the worker only) the provider keys from Secrets Manager, and may send to the step queue. Nothing
else is granted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Aws, CfnOutput, Duration, RemovalPolicy, SecretValue, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as sns_subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from treadle_infra.assets import (
    DEFAULT_LAYER_DIR,
    DEFAULT_STAGING_DIR,
    check_layer_dir,
    find_interpreter,
    stage_app_code,
    staged_config_name,
    starter_config,
    validate_config,
)

DB_NAME = "treadle"
DB_USER = "treadle"
#: the step queue's redrive threshold (the engine fails a run after 5 crashed steps on its own)
MAX_RECEIVE_COUNT = 10


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
    #: byte-compile the staged code when an interpreter of the runtime's version is on PATH
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
    #: connect through RDS Proxy (connection pooling across many Lambda environments); False
    #: connects the functions to the cluster endpoint directly (cheaper for small deployments)
    rds_proxy: bool = True
    worker_timeout: Duration = field(default_factory=lambda: Duration.minutes(5))
    worker_memory_mb: int = 1024
    worker_batch_size: int = 5
    worker_max_concurrency: int = 20
    api_memory_mb: int = 1024
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
        self.functions_sg = ec2.SecurityGroup(
            self, "FunctionsSecurityGroup", vpc=self.vpc, description="treadle functions", allow_all_outbound=True
        )

        # -- database -----------------------------------------------------------------------------
        self.database = rds.DatabaseCluster(
            self,
            "Database",
            engine=rds.DatabaseClusterEngine.aurora_postgres(version=p.db_engine_version),
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
        compile_with = find_interpreter(version) if p.byte_compile else None
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
            "TREADLE_DB_POOL_SIZE": "2",
            "TREADLE_CONFIG": f"/var/task/{staged_config_name(staged)}",
            "TREADLE_HOME": "/tmp/treadle",
            "POWERTOOLS_SERVICE_NAME": "treadle",
            # no pydantic plugins are installed: skip the entry-point scan at the first model build
            "PYDANTIC_DISABLE_PLUGINS": "__all__",
        }

        #: function name → what its trigger invokes (the `live` alias with SnapStart)
        self.entry: dict[str, lambda_.IFunction] = {}

        def function(name: str, description: str, *, timeout: Duration, memory_mb: int = 512,
                     env: dict[str, str] | None = None) -> lambda_.Function:
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
                handler=f"functions.{name}.handler.handler",
                code=self.code,
                layers=[self.layer],
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
                snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if p.snap_start else None,
            )
            self.db_secret.grant_read(fn)
            self.queue.grant_send_messages(fn)
            # what triggers invoke: the SnapStart version's alias (a snapshot only serves
            # published versions), else the function itself
            self.entry[name] = (
                lambda_.Alias(self, f"{title}Live", alias_name="live", version=fn.current_version)
                if p.snap_start else fn
            )
            return fn

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
        self.entry["worker"].add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=p.worker_batch_size,
                report_batch_item_failures=True,
                max_concurrency=p.worker_max_concurrency,
            )
        )

        self.maintenance_function = function(
            "maintenance", "treadle: re-enqueue expired leases and due steps, reconcile schedules (every minute)",
            timeout=Duration.seconds(60),
            env=schedule_env,
        )

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
            ),
        )

        # -- HTTP API -----------------------------------------------------------------------------
        self.http_api = apigw.HttpApi(self, "HttpApi", description="treadle HTTP API")
        routes = [
            ("/{proxy+}", self.entry["api"], "Api"),
            ("/v1/_webhooks/{proxy+}", self.entry["webhook"], "Webhook"),
            ("/v1/_mcp", self.entry["mcp"], "Mcp"),
        ]
        for path, fn, title in routes:
            self.http_api.add_routes(
                path=path,
                methods=[apigw.HttpMethod.ANY],
                integration=integrations.HttpLambdaIntegration(f"{title}Integration", fn),
            )

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
        for alarm in (self.dlq_alarm, self.backlog_alarm):
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.alarm_topic))

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
        }
        for name, (value, description) in outputs.items():
            CfnOutput(scope, name, value=value, description=description)
