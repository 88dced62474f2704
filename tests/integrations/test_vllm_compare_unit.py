"""`bench compare --engine vllm` without vLLM: the pool it writes, policies fitted to a one-proposer pool, and
clear errors for a missing vLLM interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from adaptspec.bench import vllm_pool
from adaptspec.bench.compare import policy_for_pool, proxy_config
from adaptspec.cli import main
from adaptspec.control.config import parse_config
from adaptspec.integrations._vllm_launch import vllm_commands

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def test_pool_is_a_valid_user_config_and_launches_the_tiny_pair(tmp_path):
    section = vllm_pool.pool("p", "draft", ["http://127.0.0.1:18001", "http://127.0.0.1:18002"],
                             python="/opt/vllm/bin/python", max_gamma=3, max_num_seqs=64, extra_args=["--seed", "1"])
    [pool] = parse_config({"pools": [section]}).pools
    assert pool.engine == "vllm" and pool.per_request and pool.proposers == ["draft"] and pool.max_gamma == 3
    cmds = vllm_commands(pool)
    assert [c.worker for c in cmds] == ["v0", "v1"]
    argv = cmds[1].argv
    assert argv[0] == "/opt/vllm/bin/python" and argv[argv.index("--port") + 1] == "18002"
    assert argv[argv.index("--max-num-seqs") + 1] == "64" and argv[-2:] == ["--seed", "1"]
    spec = argv[argv.index("--speculative-config") + 1]
    assert '"method":"draft_model"' in spec and '"num_speculative_tokens":3' in spec
    assert str(vllm_pool.TINY_DRAFT) in spec
    servers = vllm_pool.servers(section, tmp_path, tmp_path / "t")
    assert [s.port for s in servers] == [18001, 18002] and all(s.new_session for s in servers)
    assert servers[0].env["OMP_NUM_THREADS"] == "1" and servers[0].ready_path == "/v1/models"
    assert servers[0].env["TMPDIR"] == str(tmp_path / "t")


def test_the_temp_dir_leaves_room_for_vllm_ipc_socket_paths():
    tmp = vllm_pool.short_tmp()
    try:
        # vLLM names its sockets ipc://TMPDIR/<uuid4>; sun_path holds 107 bytes
        assert len(str(tmp / "cc5a3084-8217-4da8-99d3-b14244373aef")) <= 107
    finally:
        tmp.rmdir()


def test_default_python_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ADAPTSPEC_VLLM_PYTHON", str(tmp_path / "py"))
    assert vllm_pool.default_python() == tmp_path / "py"
    monkeypatch.delenv("ADAPTSPEC_VLLM_PYTHON")
    monkeypatch.setenv("ADAPTSPEC_VLLM_VENV", str(tmp_path / "venv"))
    assert vllm_pool.default_python() == tmp_path / "venv" / "bin" / "python"


def test_policies_fitted_to_a_one_proposer_pool():
    ngram = ["ngram"]
    assert policy_for_pool({"kind": "static", "proposer": "draft", "gamma": 4}, ngram) is None
    assert policy_for_pool({"kind": "static", "proposer": "draft", "gamma": 0}, ngram) is not None  # off stays
    static = {"kind": "static", "proposer": "ngram", "gamma": 4}
    assert policy_for_pool(static, ngram) == static
    table = [{"max_load": 4, "gamma": 3}]
    th = {"kind": "threshold", "proposer": "draft", "proposer_by_class": {"summarize": "ngram", "chat": "none",
                                                                           "code": "eagle"}, "table": table}
    assert policy_for_pool(th, ngram) == {"kind": "threshold", "proposer": "ngram", "table": table,
                                          "proposer_by_class": {"summarize": "ngram", "chat": "none", "code": "ngram"}}
    assert policy_for_pool(th, ["ngram", "draft"]) == th  # a pool with several proposers runs the file as is
    goodput = {"kind": "goodput"}
    assert policy_for_pool(goodput, ngram) is goodput


def test_proxy_config_for_the_vllm_pool():
    section = vllm_pool.pool("vllm", "ngram", ["http://127.0.0.1:18001"], python="/x/python")
    assert proxy_config(POLICIES / "static-draft.yaml", section, 9000) is None
    cfg = proxy_config(POLICIES / "threshold.yaml", section, 9000)
    assert cfg["pools"] == [section] and cfg["policy"]["proposer"] == "ngram"
    parsed = parse_config(cfg)
    assert parsed.policy.kind == "threshold" and parsed.server.port == 9000


def test_missing_vllm_python_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nope" / "python"
    rc = main(["bench", "compare", "--engine", "vllm", "--vllm-python", str(missing), "--concurrency", "1",
               "--requests", "1", "--no-progress", "--logs", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "no vLLM interpreter at" in err and str(missing) in err and "--vllm-python" in err


@pytest.mark.parametrize("bad", [["--vllm-proposer", "eagle"], ["--engine", "sglang"]])
def test_bad_choices_are_usage_errors(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "compare", *bad])
    assert exc.value.code == 2 and bad[1] in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["vllm", "adaptspec"])
def test_a_worker_url_that_does_not_answer_is_a_clear_error(engine, tmp_path, capsys):
    from adaptspec.bench.loadgen import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rc = main(["bench", "compare", "--engine", engine, "--worker-url", url, "--concurrency", "1", "--requests", "1",
               "--no-progress", "--logs", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and f"--worker-url: {url}" in err and "did not answer" in err
