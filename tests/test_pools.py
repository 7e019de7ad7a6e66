"""The DAG on Prefect work pools (flows/pools.py, rlvr/orchestrate/pools.py, prefect.yaml).

The end-to-end case runs this repository's `curate` and `selfcheck` as an operator would: a
dedicated Prefect server, the two process-type pools, the deployments from `prefect.yaml`
(`prefect deploy --all`), one worker per pool in a checkout of its own, a local DVC remote,
and the driver in a third checkout; then `dvc repro selfcheck` in a fourth checkout is the
reference every cached out must equal. The rest needs no server.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.errors import ConfigError, RlvrError
from rlvr.orchestrate import pools
from rlvr.orchestrate.dag import REPO_ROOT, load_dag
from rlvr.orchestrate.local_pools import cached_outs, clone, local_pools


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def _cached_outs(root: Path, stages: list[str]) -> dict[str, str]:
    """Every cached out of `stages` and its hash, as DVC's index of `root` holds them."""
    return {path: h for name, outs in cached_outs(root).items() if name in stages
            for path, h in outs.items()}


def test_curate_and_selfcheck_through_two_pools_equal_dvc_repro(tmp_path):
    remote = tmp_path / "dvc-remote"
    remote.mkdir()
    driver = clone(REPO_ROOT, tmp_path / "driver", remote)
    cpu = clone(REPO_ROOT, tmp_path / "cpu", remote)
    gpu = clone(REPO_ROOT, tmp_path / "gpu", remote)
    env = {**os.environ, "RLVR_PYTHON": sys.executable}
    with local_pools(tmp_path / "prefect", driver, {"cpu": cpu, "gpu": gpu}, env) as env:
        done = subprocess.run([sys.executable, "-m", "flows.pools", "curate", "selfcheck",
                               "--pool", "selfcheck=gpu"], cwd=driver, env=env,
                              capture_output=True, text=True, timeout=900)
    logs = "".join(f.read_text() for f in sorted((tmp_path / "prefect").glob("worker-*.log")))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs[-3000:]

    # each stage ran on its own pool's worker, in that worker's checkout
    assert (cpu / "artifacts/tasks_authored.parquet").is_file()
    assert not (cpu / "artifacts/selfcheck_verdicts.parquet").exists()
    assert (gpu / "artifacts/selfcheck_verdicts.parquet").is_file()

    reference = clone(REPO_ROOT, tmp_path / "reference")
    subprocess.run([sys.executable, "-m", "dvc", "repro", "selfcheck"], cwd=reference,
                   env=env, check=True, capture_output=True)
    stages = ["curate", "selfcheck"]
    expected = _cached_outs(reference, stages)
    assert len(expected) == 4
    assert _cached_outs(driver, stages) == expected          # the driver's lock
    for path in expected:                                     # and its workspace
        assert (driver / path).read_bytes() == (reference / path).read_bytes(), path
    for name in ("metrics/curate.json", "metrics/selfcheck.json"):
        assert (driver / name).read_text() == (reference / name).read_text(), name
    status = subprocess.run([sys.executable, "-m", "dvc", "status", *stages], cwd=driver,
                            capture_output=True, text=True, check=True)
    assert "up to date" in status.stdout, status.stdout


# ------------------------------------------------------------------ no Prefect server needed
def test_stages_are_placed_on_the_gpu_pool_where_a_model_trains():
    placed = {name: pools.deployment_of(name) for name in load_dag()}
    assert {n for n, d in placed.items() if d == "gpu"} == {"sft", "grpo", "evaluate"}
    assert pools.deployment_of("curate", {"curate": "gpu"}) == "gpu"
    with pytest.raises(ConfigError, match=r"pools\['sft'\] = 'tpu'"):
        pools.deployment_of("sft", {"sft": "tpu"})


def test_prefect_yaml_deploys_the_flows_on_the_named_pools():
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    by_name = {d["name"]: d for d in spec["deployments"]}
    for name, pool in pools.DEPLOYMENTS.items():
        assert by_name[name]["work_pool"]["name"] == pool
        assert load_flow_from_entrypoint(by_name[name]["entrypoint"]).name == pools.STAGE_FLOW
    assert load_flow_from_entrypoint(by_name["dag"]["entrypoint"]).name == "rlvr-pools"
    assert spec["pull"] == [{"rlvr.orchestrate.pools.enter_checkout": {}}]


def _project(root: Path) -> Path:
    """A two-stage DVC project (b depends on a's out) in a fresh git repository."""
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.invalid")
    _git(root, "config", "user.name", "t")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(
        "stages:\n"
        "  a:\n    cmd: python -c \"open('a.txt', 'w').write('a'); open('a.json', 'w').write('{}')\"\n"
        "    outs: [a.txt]\n"
        "    metrics:\n      - a.json:\n          cache: false\n"
        "  b:\n    cmd: python -c \"open('b.txt', 'w').write(open('a.txt').read() + 'b')\"\n"
        "    deps: [a.txt]\n    outs: [b.txt]\n")
    (root / "code.py").write_text("x = 1\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "init")
    return root


def test_a_checkout_with_modified_sources_or_another_revision_is_refused(tmp_path):
    root = _project(tmp_path / "p")
    dag = load_dag(root)
    head = pools.source_revision(root, dag)
    (root / "dvc.lock").write_text("schema: '2.0'\n")   # the lock and outs may differ
    (root / "a.txt").write_text("a")
    assert pools.source_revision(root, dag) == head
    with pytest.raises(ConfigError, match="at .* the run at 0123456789ab"):
        pools.require_revision(root, dag, "0123456789abcdef")
    (root / "code.py").write_text("x = 2\n")
    with pytest.raises(ConfigError, match="tracked sources differ .*: code.py"):
        pools.source_revision(root, dag)


def test_no_remote_is_a_named_error_before_the_stage_runs(tmp_path):
    root = _project(tmp_path / "p")
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q", "a"], cwd=root, check=True,
                   capture_output=True)
    dag = load_dag(root)
    with pytest.raises(ConfigError, match="no DVC remote"):
        pools.push_outputs(root, "a", None)
    other = clone(root, tmp_path / "q")
    pools.install_lock(other, pools.read_lock(root))
    with pytest.raises(ConfigError, match="stage b: pulling its inputs .*no DVC remote"):
        pools.pull_inputs(other, dag["b"], None)


def test_a_stage_travels_to_another_checkout_through_the_remote(tmp_path):
    """Lock as text, cached outs by push / pull, uncached outs as bytes: b runs in a second
    checkout on a's outputs, and the first checkout ends with both."""
    first = _project(tmp_path / "p")
    remote = tmp_path / "remote"
    subprocess.run([sys.executable, "-m", "dvc", "remote", "add", "-q", "-d", "--local",
                    "shared", str(remote)], cwd=first, check=True)
    second = clone(first, tmp_path / "q", remote)
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q", "--single-item", "a"],
                   cwd=first, check=True, capture_output=True)
    pools.push_outputs(first, "a", None)
    files = pools.uncached_outputs(first, "a")
    assert list(files) == ["a.json"]

    pools.install_lock(second, pools.read_lock(first))
    pools.pull_inputs(second, load_dag(second)["b"], None)
    assert (second / "a.txt").read_text() == "a"
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q", "--single-item", "b"],
                   cwd=second, check=True, capture_output=True)
    pools.push_outputs(second, "b", None)

    pools.install_lock(first, pools.read_lock(second))
    pools.checkout_outputs(first, ["a", "b"], None)
    assert (first / "b.txt").read_text() == "ab"
    elsewhere = tmp_path / "r"
    elsewhere.mkdir()
    pools.write_files(elsewhere, files)
    assert (elsewhere / "a.json").read_text() == "{}"
    with pytest.raises(RlvrError, match="outside"):
        pools.write_files(first, {"../escape.txt": "eA=="})


def test_the_driver_needs_a_prefect_server(monkeypatch, capsys):
    import flows.pools as fpools

    monkeypatch.setenv("PREFECT_API_URL", "")
    with pytest.raises(SystemExit) as exc:
        fpools.main(["curate"])
    assert exc.value.code == 2
    assert "PREFECT_API_URL is not set" in capsys.readouterr().err


def test_a_malformed_pool_placement_is_named(monkeypatch, capsys):
    import flows.pools as fpools

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    for argv, message in ((["--pool", "curate"], "expected STAGE=cpu or STAGE=gpu"),
                          (["--pool", "curate=tpu"], "not a deployment"),
                          (["nosuchstage"], "unknown stage")):
        with pytest.raises(SystemExit) as exc:
            fpools.main(argv)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err
