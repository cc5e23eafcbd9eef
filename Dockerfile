# treadle sidecar image: `treadle serve` (API + in-process workers + sweeper) as a non-root user.
# Postgres: $DATABASE_URL (see docker-compose.example.yaml), else an embedded Postgres 16 + pgvector
# whose data lives in the /data volume.
# BASE: another Python 3.11+ image with pip (scripts/image_smoke.sh builds one from Debian's
# packages, where Docker Hub cannot be reached)
ARG BASE=python:3.12-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY core ./core
COPY sidecar ./sidecar
COPY cloud ./cloud
RUN pip install ".[otel]" \
 && useradd --system --uid 10001 --create-home --home-dir /home/treadle treadle \
 && mkdir -p /data /etc/treadle \
 && treadle --config /etc/treadle/treadle.yaml init \
 && chown -R treadle:treadle /data

USER treadle
WORKDIR /home/treadle
# Listening beyond loopback requires TREADLE_AUTH_TOKEN: `treadle serve` refuses to start without it.
ENV TREADLE_HOME=/data \
    TREADLE_CONFIG=/etc/treadle/treadle.yaml \
    TREADLE_LISTEN=0.0.0.0:8787
VOLUME ["/data"]
EXPOSE 8787
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=2)"]
ENTRYPOINT ["treadle"]
CMD ["serve"]
