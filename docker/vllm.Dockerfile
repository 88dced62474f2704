# vLLM with the adaptspec plugin (per-request speculation length / off, per-class acceptance counters).
# The plugin supports vLLM 0.32.x and refuses to start on any other version. Build from the repo root:
#   docker build -f docker/vllm.Dockerfile -t adaptspec-vllm:0.32.0 .
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
COPY pyproject.toml README.md /opt/adaptspec/
COPY adaptspec /opt/adaptspec/adaptspec
# --no-deps: the plugin needs only what vLLM already ships (prometheus-client); vLLM loads it through the
# `vllm.general_plugins` entry point in every process it starts.
RUN python3 -m pip install --no-cache-dir --no-deps /opt/adaptspec
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
