"""`adaptspec launch sglang|vllm`: command lines built from a config's pools."""

import json
import shlex
import sys
import textwrap

import pytest

from adaptspec.cli import main

CONFIG = textwrap.dedent("""
    pools:
      - name: vllm-adaptive
        engine: vllm
        per_request: true
        proposers: [ngram]
        max_gamma: 6
        models: [llama]
        workers: [{name: v0, url: "http://127.0.0.1:8101"}, {name: v1, url: "http://127.0.0.1:8102"}]
        launch: {model: /models/llama, env: {VLLM_CPU_KVCACHE_SPACE: "1"}, extra_args: [--max-model-len, "4096"]}
      - name: vllm-draft
        engine: vllm
        per_request: false
        proposers: [draft]
        gamma: 3
        workers: [{name: d0, url: "http://127.0.0.1:8201"}]
        launch: {model: /models/llama, draft_model: /models/llama-1b}
      - name: vllm-off
        engine: vllm
        per_request: false
        gamma: 0
        models: [/models/llama]
        workers: [{name: o0, url: "http://127.0.0.1:8301"}]
      - name: sg-eagle
        engine: sglang
        per_request: false
        proposers: [eagle]
        gamma: 3
        workers: [{name: s0, url: "http://127.0.0.1:30000"}]
        launch: {model: /models/llama, draft_model: /models/eagle3}
      - name: sg-ngram
        engine: sglang
        per_request: false
        proposers: [ngram]
        gamma: 4
        workers: [{name: s1, url: "http://127.0.0.1:30001"}]
        launch: {model: /models/llama}
      - name: sg-off
        engine: sglang
        per_request: false
        gamma: 0
        workers: [{name: s2, url: "http://127.0.0.1:30002"}]
        launch: {model: /models/llama}
""")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "pools.yaml"
    path.write_text(CONFIG)
    return str(path)


def commands(capsys, *argv) -> dict[str, list[str]]:
    assert main(["launch", *argv]) == 0
    out = capsys.readouterr().out.splitlines()
    result, worker = {}, None
    for line in out:
        if line.startswith("# pool"):
            worker = line.rsplit(" ", 1)[1]
        else:
            result[worker] = shlex.split(line)
    return result


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_vllm_per_request_pool_gets_max_gamma_plugin_env_and_per_request_stats(config, capsys):
    cmds = commands(capsys, "vllm", "--config", config, "--pool", "vllm-adaptive")
    assert set(cmds) == {"v0", "v1"}
    argv = cmds["v0"]
    # the plugin scores lookup (vLLM's sizes, up to the pool's gamma) on the requests run without it
    assert argv[:4] == ["ADAPTSPEC_VLLM_PROPOSER=ngram", "ADAPTSPEC_VLLM_SHADOW_NGRAM=2:4:6",
                        "VLLM_CPU_KVCACHE_SPACE=1", "python3"]
    assert argv[4:6] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flag(argv, "--model") == "/models/llama" and flag(argv, "--served-model-name") == "llama"
    assert flag(argv, "--port") == "8101" and flag(cmds["v1"], "--port") == "8102"
    spec = json.loads(flag(argv, "--speculative-config"))
    assert spec == {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert "--enable-per-request-metrics" in argv and flag(argv, "--per-request-spec-decode-metrics") == "summary"
    assert argv[-2:] == ["--max-model-len", "4096"]


def test_vllm_fixed_pools(config, capsys):
    cmds = commands(capsys, "vllm", "--config", config)
    assert set(cmds) == {"v0", "v1", "d0", "o0"}
    spec = json.loads(flag(cmds["d0"], "--speculative-config"))
    assert spec == {"method": "draft_model", "num_speculative_tokens": 3, "model": "/models/llama-1b"}
    off = cmds["o0"]
    assert "--speculative-config" not in off and "--served-model-name" not in off
    assert flag(off, "--model") == "/models/llama"


def test_sglang_pools(config, capsys):
    cmds = commands(capsys, "sglang", "--config", config)
    eagle = cmds["s0"]
    assert eagle[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--enable-metrics" in eagle
    assert flag(eagle, "--speculative-algorithm") == "EAGLE3"
    assert flag(eagle, "--speculative-draft-model-path") == "/models/eagle3"
    assert flag(eagle, "--speculative-num-steps") == "3"
    assert flag(eagle, "--speculative-eagle-topk") == "1"
    assert flag(eagle, "--speculative-num-draft-tokens") == "4"  # a chain of 3 drafts + the bonus position
    ngram = cmds["s1"]
    assert flag(ngram, "--speculative-algorithm") == "NGRAM" and "--speculative-draft-model-path" not in ngram
    assert flag(ngram, "--speculative-num-draft-tokens") == "5"
    assert not any(a.startswith("--speculative") for a in cmds["s2"])


@pytest.mark.parametrize(("engine", "pool", "message"), [
    ("sglang", "nope", "no pool 'nope' with engine 'sglang'"),
    ("vllm", "sg-off", "no pool 'sg-off' with engine 'vllm'"),
])
def test_unknown_pool_is_a_config_error(config, capsys, engine, pool, message):
    assert main(["launch", engine, "--config", config, "--pool", pool]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("pool_yaml", "key"), [
    ("{name: p, engine: vllm, per_request: true, proposers: [ngram, draft], workers: [{name: w, url: 'http://h:1'}],"
     " launch: {model: m}}", "pools.p.proposers"),
    ("{name: p, engine: vllm, per_request: false, proposers: [draft], gamma: 2, workers: [{name: w, url: 'http://h:1'}],"
     " launch: {model: m}}", "pools.p.launch.draft_model"),
    ("{name: p, engine: vllm, per_request: false, gamma: 0, workers: [{name: w, url: 'http://h:1'}]}",
     "pools.p.launch.model"),
    ("{name: p, engine: sglang, per_request: true, proposers: [eagle], workers: [{name: w, url: 'http://h:1'}],"
     " launch: {model: m}}", "pools.p.per_request"),
    ("{name: p, engine: sglang, per_request: false, gamma: 0, workers: [{name: w, url: 'http://h'}],"
     " launch: {model: m}}", "pools.p.workers[0].url"),
])
def test_bad_pools_name_the_key(tmp_path, capsys, pool_yaml, key):
    path = tmp_path / "bad.yaml"
    path.write_text(f"pools:\n  - {pool_yaml}\n")
    engine = "sglang" if "sglang" in pool_yaml else "vllm"
    assert main(["launch", engine, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"key '{key}'" in err and str(path) in err


def test_run_starts_each_engine_with_its_env_and_waits(tmp_path):
    # a stand-in `sglang.launch_server` module that records how it was started
    pkg = tmp_path / "fake" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(
        "import json, os, sys\n"
        "port = sys.argv[sys.argv.index('--port') + 1]\n"
        "with open(os.path.join(os.environ['OUT_DIR'], port + '.json'), 'w') as f:\n"
        "    json.dump({'argv': sys.argv[1:], 'marker': os.environ.get('MARKER')}, f)\n")


    config = tmp_path / "pools.yaml"
    config.write_text(textwrap.dedent(f"""
        pools:
          - name: sg
            engine: sglang
            per_request: false
            proposers: [ngram]
            gamma: 2
            workers: [{{name: a, url: "http://127.0.0.1:31001"}}, {{name: b, url: "http://127.0.0.1:31002"}}]
            launch:
              model: /models/m
              python: {sys.executable}
              env: {{PYTHONPATH: "{tmp_path / 'fake'}", OUT_DIR: "{tmp_path}", MARKER: "x1"}}
    """))
    assert main(["launch", "sglang", "--config", str(config), "--run"]) == 0
    for port in ("31001", "31002"):
        seen = json.loads((tmp_path / f"{port}.json").read_text())
        assert seen["marker"] == "x1"
        assert seen["argv"][:2] == ["--model-path", "/models/m"]
        assert flag(seen["argv"], "--speculative-algorithm") == "NGRAM"
