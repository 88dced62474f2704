"""deploy/k8s, checked without a cluster: every resource against the Kubernetes OpenAPI schemas bundled in
`kubernetes-validate` (offline, strict: unknown fields fail), then the pieces against each other and the code:
labels and selectors, ports, probe paths that the proxy serves, the proxy's config (valid, its worker and
Redis URLs resolve to the Services), the vLLM command lines equal to what `adaptspec launch vllm` prints, the
Grafana dashboards equal to dashboards/*.json, image tags equal to docker-compose.yml's.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from adaptspec.cli._launch import commands_for
from adaptspec.control.config import load_config

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
KUSTOMIZATION = yaml.safe_load((K8S / "kustomization.yaml").read_text())
FILES = {f: list(yaml.safe_load_all((K8S / f).read_text())) for f in KUSTOMIZATION["resources"]}
DOCS = [d for docs in FILES.values() for d in docs]
# the oldest Kubernetes minor still common in managed clusters, and the newest the package bundles
VERSIONS = ["1.29.0", kubernetes_validate.utils.latest_version()]


def of_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in DOCS if d["kind"] == kind}


DEPLOYMENTS, SERVICES, CONFIGMAPS = of_kind("Deployment"), of_kind("Service"), of_kind("ConfigMap")
PROXY = DEPLOYMENTS["adaptspec-proxy"]
PROXY_POD = PROXY["spec"]["template"]
[PROXY_CONTAINER] = PROXY_POD["spec"]["containers"]


def pod_labels(deployment: dict) -> dict:
    return deployment["spec"]["template"]["metadata"]["labels"]


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container_port(deployment: dict, name_or_number) -> int:
    ports = [p for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
    found = [p["containerPort"] for p in ports if name_or_number in (p.get("name"), p["containerPort"])]
    assert len(found) == 1, (deployment["metadata"]["name"], name_or_number, ports)
    return found[0]


def proxy_config(tmp_path: Path):
    path = tmp_path / "adaptspec.yaml"
    path.write_text(CONFIGMAPS["adaptspec-config"]["data"]["adaptspec.yaml"])
    return load_config(path), path


def test_kustomization_lists_every_manifest_once():
    on_disk = {f.name for f in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(KUSTOMIZATION["resources"]) == sorted(on_disk)
    assert KUSTOMIZATION["namespace"] == "adaptspec" and of_kind("Namespace").keys() == {"adaptspec"}
    names = [(d["kind"], d["metadata"]["name"]) for d in DOCS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index", range(len(DOCS)), ids=[f"{d['kind']}-{d['metadata']['name']}" for d in DOCS])
def test_resource_is_valid_kubernetes(index, version):
    kubernetes_validate.validate(DOCS[index], version, strict=True)  # raises ValidationError with the path


def test_validator_really_rejects_mistakes():
    """The schemas are really applied: a misspelt field and a wrong type fail."""
    bad = yaml.safe_load(yaml.safe_dump(PROXY))
    bad["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
    bad = yaml.safe_load(yaml.safe_dump(PROXY))
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_deployment_selectors_match_their_pods_and_every_service_one_deployment():
    for name, dep in DEPLOYMENTS.items():
        assert matches(dep["spec"]["selector"]["matchLabels"], pod_labels(dep)), name
    for name, svc in SERVICES.items():
        targets = [d for d in DEPLOYMENTS.values() if matches(svc["spec"]["selector"], pod_labels(d))]
        assert len(targets) == 1, (name, [d["metadata"]["name"] for d in targets])
        for port in svc["spec"]["ports"]:
            container_port(targets[0], port["targetPort"])


def test_proxy_replicas_probes_and_resources():
    assert PROXY["spec"]["replicas"] >= 2
    port = container_port(PROXY, "http")
    assert PROXY_CONTAINER["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert PROXY_CONTAINER["livenessProbe"]["httpGet"]["path"] == "/health/live"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container_port(PROXY, PROXY_CONTAINER[probe]["httpGet"]["port"]) == port
    for dep in DEPLOYMENTS.values():
        for c in dep["spec"]["template"]["spec"]["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), dep["metadata"]["name"]


# app.py stores the proxy under a str key (aiohttp recommends web.AppKey); not this test's concern
@pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
def test_probe_paths_are_routes_of_the_proxy(tmp_path):
    from adaptspec.proxy.app import Proxy, create_app

    cfg, _ = proxy_config(tmp_path)
    routes = {r.canonical for r in create_app(Proxy(cfg)).router.resources()}
    probes = {PROXY_CONTAINER[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    annotations = PROXY_POD["metadata"]["annotations"]
    assert probes | {annotations["prometheus.io/path"]} <= routes


def test_termination_grace_covers_the_proxy_drain(tmp_path):
    """The kubelet SIGKILLs at terminationGracePeriodSeconds: it must outlast the proxy's own grace, and the
    drain delay must outlast the readiness probe's failure window, so no new connection meets a closed port."""
    cfg, _ = proxy_config(tmp_path)
    grace = PROXY_POD["spec"]["terminationGracePeriodSeconds"]
    assert cfg.server.grace_period_s + 2 <= grace
    probe = PROXY_CONTAINER["readinessProbe"]
    assert cfg.server.drain_delay_s >= probe["periodSeconds"] * probe["failureThreshold"]
    assert "lifecycle" not in PROXY_CONTAINER  # the delay is in the process: a preStop sleep would add to it


def test_pdb_and_hpa_target_the_proxy():
    [pdb] = of_kind("PodDisruptionBudget").values()
    assert matches(pdb["spec"]["selector"]["matchLabels"], pod_labels(PROXY))
    assert pdb["spec"]["minAvailable"] < PROXY["spec"]["replicas"]  # a node drain can always proceed
    [hpa] = of_kind("HorizontalPodAutoscaler").values()
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", "adaptspec-proxy")
    assert hpa["spec"]["minReplicas"] == PROXY["spec"]["replicas"] < hpa["spec"]["maxReplicas"]


def test_prometheus_annotations_name_the_metrics_port():
    scraped = [d for d in DEPLOYMENTS.values()
               if d["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"]
    assert {d["metadata"]["name"] for d in scraped} >= {"adaptspec-proxy", "vllm-spec", "vllm-plain"}
    for dep in scraped:
        ann = dep["spec"]["template"]["metadata"]["annotations"]
        assert container_port(dep, int(ann["prometheus.io/port"])) and ann["prometheus.io/path"] == "/metrics"


def test_config_is_valid_and_mounted_for_hot_reload(tmp_path):
    cfg, _ = proxy_config(tmp_path)
    assert cfg.server.port == container_port(PROXY, "http") and cfg.server.host == "0.0.0.0"
    args = PROXY_CONTAINER["args"]
    assert args[0] == "serve"
    config_file = Path(args[args.index("--config") + 1])
    [mount] = [m for m in PROXY_CONTAINER["volumeMounts"] if Path(m["mountPath"]) == config_file.parent]
    assert "subPath" not in mount  # a subPath mount never sees ConfigMap updates: no hot reload
    [volume] = [v for v in PROXY_POD["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "adaptspec-config"
    assert config_file.name in CONFIGMAPS["adaptspec-config"]["data"]
    assert "--watch" not in args  # the default: the file is polled every second


def test_config_urls_resolve_to_services(tmp_path):
    cfg, _ = proxy_config(tmp_path)
    urls = [w.url for p in cfg.pools for w in p.workers] + [cfg.state.url]
    assert cfg.state.backend == "redis" and len(cfg.pools) >= 1
    for url in urls:
        parts = urlsplit(url)
        svc = SERVICES[parts.hostname]
        assert parts.port in {p["port"] for p in svc["spec"]["ports"]}, url


def test_config_map_update_reaches_the_reloader(tmp_path):
    """The kubelet updates a ConfigMap volume by swapping the `..data` symlink to a new directory; the
    proxy's reloader (which polls os.stat of the config path) sees that as a change."""
    from adaptspec.proxy.reload import _stamp

    def publish(version: str, text: str) -> None:
        target = tmp_path / f"..{version}"
        target.mkdir()
        (target / "adaptspec.yaml").write_text(text)
        (tmp_path / "..data_tmp").symlink_to(target.name)
        (tmp_path / "..data_tmp").replace(tmp_path / "..data")  # atomic rename, as the kubelet does

    text = CONFIGMAPS["adaptspec-config"]["data"]["adaptspec.yaml"]
    publish("2026_12_01_00_00_00.1", text)
    (tmp_path / "adaptspec.yaml").symlink_to("..data/adaptspec.yaml")
    before = _stamp(str(tmp_path / "adaptspec.yaml"))
    publish("2026_12_01_00_01_00.2", text.replace("kind: goodput", "kind: bandit"))
    after = _stamp(str(tmp_path / "adaptspec.yaml"))
    assert before is not None and after is not None and before != after
    assert load_config(tmp_path / "adaptspec.yaml").policy.kind == "bandit"


def test_vllm_workers_run_what_adaptspec_launch_prints(tmp_path):
    cfg, path = proxy_config(tmp_path)
    commands = {cmd.worker: cmd for _, cmd in commands_for(cfg, "vllm", None, str(path))}
    assert commands and set(commands) <= set(DEPLOYMENTS)
    entrypoint = [line for line in (ROOT / "docker" / "vllm.Dockerfile").read_text().splitlines()
                  if line.startswith("ENTRYPOINT")]
    assert entrypoint == ['ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]']
    for name, cmd in commands.items():
        dep = DEPLOYMENTS[name]
        [c] = dep["spec"]["template"]["spec"]["containers"]
        assert cmd.argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        assert c["args"] == cmd.argv[3:], name
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        assert all(env.get(k) == v for k, v in cmd.env.items()), (name, cmd.env)
        port = int(c["args"][c["args"].index("--port") + 1])
        assert container_port(dep, "http") == port
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1" == c["resources"]["requests"]["nvidia.com/gpu"]
        assert dep["spec"]["template"]["spec"]["nodeSelector"]
        assert c["startupProbe"]["httpGet"]["path"] == "/health"  # engine load: minutes, before liveness


def test_images_are_the_compose_builds():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    built = {svc["build"]["dockerfile"]: svc["image"] for svc in compose.values() if "build" in svc}
    assert PROXY_CONTAINER["image"] == built["docker/proxy.Dockerfile"]
    for name in ("vllm-spec", "vllm-plain"):
        [c] = DEPLOYMENTS[name]["spec"]["template"]["spec"]["containers"]
        assert c["image"] == built["docker/vllm.Dockerfile"]
    [redis] = DEPLOYMENTS["redis"]["spec"]["template"]["spec"]["containers"]
    assert redis["image"] == compose["redis"]["image"]
    tags = {i["name"]: i["newTag"] for i in KUSTOMIZATION["images"]}
    for image in (PROXY_CONTAINER["image"], built["docker/vllm.Dockerfile"]):
        name, tag = image.split(":")
        assert tags[name] == tag


def test_dashboards_config_map_is_current():
    spec = importlib.util.spec_from_file_location("k8s_dashboards", K8S / "dashboards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    current = (K8S / "grafana-dashboards.yaml").read_text()
    assert current == module.render(), "dashboards changed: run python deploy/k8s/dashboards.py"
    data = CONFIGMAPS["adaptspec-dashboards"]["data"]
    assert data == {f.name: f.read_text() for f in (ROOT / "dashboards").glob("*.json")}
    assert CONFIGMAPS["adaptspec-dashboards"]["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed (its kustomize builds the dir)")
def test_kustomize_builds_the_directory():
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = list(yaml.safe_load_all(out.stdout))
    assert len(built) == len(DOCS)
    for d in built:
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "adaptspec"
        assert d["kind"] == "Namespace" or d["metadata"]["namespace"] == "adaptspec"
