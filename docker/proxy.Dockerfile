# The adaptspec proxy (`adaptspec serve`). Build from the repository root:
#   docker build -f docker/proxy.Dockerfile -t adaptspec-proxy:0.1.0 .
FROM python:3.11.10-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/adaptspec
COPY pyproject.toml README.md ./
COPY adaptspec ./adaptspec
COPY policies ./policies
# The proxy needs only the base dependencies (no torch): aiohttp, pydantic, redis, prometheus-client, ...
RUN pip install --no-cache-dir . && useradd --system --uid 10001 adaptspec
USER 10001
EXPOSE 8000
# liveness only: /health/ready (a worker answers) is for load balancers, and engines start slowly
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health/live', timeout=2)"]
ENTRYPOINT ["adaptspec"]
CMD ["serve", "--config", "/etc/adaptspec/adaptspec.yaml"]
