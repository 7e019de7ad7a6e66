"""The `rlvr` command. Users and tooling rely on these exact forms:

    rlvr tasks list --tasks FILE
    rlvr tasks show ID --tasks FILE [--patch]
    rlvr tasks materialize ID --tasks FILE --out DIR
    rlvr tasks import-swebench FILE --repos DIR --out FILE
    rlvr tasks export-swebench --tasks FILE --out FILE
    rlvr tasks check DIR [--params FILE] [--backend bwrap|docker]
    rlvr tasks rejections FILE
    rlvr curate --source DIR --out FILE [--params FILE] [--backend bwrap|docker]
    rlvr verify --tasks FILE --task-id ID --patch FILE [--backend bwrap|docker]
    rlvr gate --candidate-eval FILE [--champion-eval FILE] --out DIR [--candidate NAME]
              [--champion NAME] [--training-metrics FILE] [--register]
    rlvr gate rollback [--reason TEXT]
    rlvr metrics [PATTERN ...] [--rev REV] [--changed] [--details]
    rlvr policy check DIR [--format auto|rlvr|hermes|llama3_json] [--thinking] [--json]

Bad input exits 2 with one line naming the file / field / id (a directory given where a
FILE is expected is named as such). `rlvr tasks check` (an author's tool: it shows hidden
test outcomes and error lines) exits 0 when curation accepts the task, 1 when it rejects it.
`rlvr policy check` exits 0 when the model directory can be trained as it is, 2 naming the
missing piece (template, format, special token) otherwise.
Output piped into a reader that stops early (`rlvr tasks list --tasks FILE | head`) ends the
command quietly, exit status 141.

`rlvr --help` stays fast: a command imports its own machinery (pyarrow, the enclave, the
sandbox, curation, the gate's statistics) when it runs; each such import says what it costs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from rlvr.errors import RlvrError, exit_on_error
from rlvr.tracking.metrics_view import metric_rows, render


def _file(value: str) -> Path:
    """argparse type of a FILE argument: a directory there is an error saying so (else the
    reader would report it as "not found" or fail on it later)."""
    path = Path(value)
    if path.is_dir():
        raise RlvrError(f"{value}: is a directory, expected a file")
    return path


def _load_params(path: Path):
    """curate/sandbox/verify params from `path` when it exists, else the defaults."""
    from rlvr.authoring.curation import CurationParams, load_params  # lazy: enclave, ~0.3 s
    from rlvr.enclave.batch import VerifyParams  # lazy: enclave, pyarrow, numpy, ~0.4 s
    from rlvr.sandbox.params import SandboxParams  # lazy: the sandbox package and backends

    if not path.exists():
        return CurationParams(), SandboxParams(), VerifyParams()
    from rlvr.config import load_section  # lazy: PyYAML, ~20 ms

    cur, sandbox = load_params(path)
    return cur, sandbox, load_section(VerifyParams, "verify", path)


def cmd_tasks_list(args) -> None:
    from rlvr.tasks.pool import list_tasks  # lazy: pyarrow, ~0.1 s

    for t in list_tasks(args.tasks):
        print(f"{t['task_id']}\t{t['family']}\t{t['split']}\t{t['source']}\t"
              f"f2p={len(t['fail_to_pass'])}\tp2p={len(t['pass_to_pass'])}")


def cmd_tasks_show(args) -> None:
    from rlvr.tasks.pool import get_task, load_tasks  # lazy: pyarrow, ~0.1 s

    t = get_task(load_tasks(args.tasks), args.id, args.tasks)
    if args.patch:   # the reference fix as the unified diff it is (`| git apply` in repo/)
        sys.stdout.write(t.reference_patch)
        return
    print(json.dumps({
        "task_id": t.task_id, "family": t.family, "split": t.split, "source": t.source,
        "instruction": t.instruction, "repo_files": sorted(t.repo_files),
        "public_tests": list(t.public_tests), "hidden_test_files": sorted(t.hidden_tests),
        "fail_to_pass": list(t.fail_to_pass), "pass_to_pass": list(t.pass_to_pass),
        "quarantined": [{"test_id": q, "reason": r} for q, r in t.quarantined],
        "provenance": t.provenance, "checks": t.checks, **t.hashes(),
    }, indent=2))


def cmd_tasks_materialize(args) -> None:
    from rlvr.tasks.materialize import materialize  # lazy: subprocess, ~15 ms
    from rlvr.tasks.pool import get_task, load_tasks  # lazy: pyarrow, ~0.1 s

    task = get_task(load_tasks(args.tasks), args.id, args.tasks)
    print(materialize(task, args.out))


def cmd_import_swebench(args) -> None:
    from rlvr.authoring.swebench import import_swebench  # lazy: pyarrow, sandbox, ~0.3 s
    from rlvr.tasks.pool import save_tasks  # lazy: pyarrow, ~0.1 s

    tasks = import_swebench(args.file, args.repos)
    save_tasks(args.out, tasks)
    print(f"imported {len(tasks)} task(s) -> {args.out}")


def cmd_export_swebench(args) -> None:
    from rlvr.artifacts.io import write_text  # lazy: pyarrow, ~0.1 s
    from rlvr.authoring.swebench import export_swebench  # lazy: pyarrow, sandbox, ~0.3 s
    from rlvr.tasks.pool import load_tasks  # lazy: pyarrow, ~0.1 s

    rows = export_swebench(load_tasks(args.tasks))
    write_text(args.out, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    print(f"exported {len(rows)} instance(s) -> {args.out}")


def cmd_tasks_check(args) -> int:
    from rlvr.authoring.check import check_task, format_check  # lazy: enclave, agent, ~0.5 s

    params, sandbox, _ = _load_params(args.params)
    if args.backend:
        sandbox = dataclasses.replace(sandbox, backend=args.backend)
    report = check_task(args.dir, params, sandbox)
    print(format_check(report))
    return 0 if report.accepted else 1


def cmd_tasks_rejections(args) -> None:
    # lazy: curation with the enclave and the agent, ~0.5 s
    from rlvr.authoring.check import format_rejections, read_rejections

    print(format_rejections(read_rejections(args.file)))


def cmd_curate(args) -> None:
    from rlvr.authoring.curation import run_curation  # lazy: enclave, agent, ~0.3 s
    from rlvr.tasks.pool import rejections_path, save_pool  # lazy: pyarrow, ~0.1 s

    params, sandbox, _ = _load_params(args.params)
    if args.backend:
        sandbox = dataclasses.replace(sandbox, backend=args.backend)
    result = run_curation(args.source, params, sandbox)
    save_pool(args.out, result.accepted, result.rejections)
    stats = result.stats()
    print(json.dumps({**stats, "tasks": str(args.out),
                      "rejections": str(rejections_path(args.out))}, indent=2))


def cmd_verify(args) -> None:
    from rlvr.enclave import Enclave  # lazy: enclave and sandbox, ~0.1 s
    from rlvr.tasks.patches import require_diff  # lazy: hashes its own sources, ~25 ms
    from rlvr.tasks.pool import get_task, load_tasks  # lazy: pyarrow, ~0.1 s

    _, sandbox, vparams = _load_params(args.params)
    task = get_task(load_tasks(args.tasks), args.task_id, args.tasks)
    try:
        patch = args.patch.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RlvrError(f"{args.patch}: cannot read patch: {exc}") from None
    require_diff(patch, str(args.patch))
    backend = args.backend or sandbox.backend
    with Enclave(backend=backend, limits=sandbox.limits.to_limits(), workers=1,
                 consensus_runs=vparams.consensus_runs,
                 sandbox_options=sandbox.options() if backend == sandbox.backend else {}) as enclave:
        verdict = enclave.verify(task, patch, seed=args.seed if args.seed is not None
                                 else vparams.seed)
    print(json.dumps(verdict.public(), sort_keys=True))


def _gate_params(args):
    """The `gate` section of --params (defaults when the file has none), with the names and
    directories given on the command line. Directories are hashed only when named here: on
    "any two evaluations" the evaluated policy versions are the checkpoint hashes."""
    from rlvr.config import read_params  # lazy: PyYAML, ~20 ms
    from rlvr.gate.params import GateParams, load_params  # lazy: pyarrow, ~0.1 s

    params = (load_params(args.params) if args.params.exists()
              and "gate" in read_params(args.params) else GateParams())
    changes = {"candidate_dir": args.candidate_dir or "",
               "champion_dir": args.champion_dir or ""}
    if args.candidate:
        changes["candidate"] = args.candidate
    if args.champion:
        changes["champion"] = args.champion
    try:
        return dataclasses.replace(params, **changes)
    except ValueError as exc:
        raise RlvrError(f"gate: {exc}") from None


def cmd_gate(args) -> None:
    if args.gate_command == "rollback":
        return cmd_gate_rollback(args)
    for flag in ("candidate_eval", "out"):
        if getattr(args, flag) is None:
            raise RlvrError(f"rlvr gate: --{flag.replace('_', '-')} is required")
    # lazy: SciPy, pyarrow and the evaluation's plots, ~0.9 s
    from rlvr.gate.apply import decide_and_register, load_inputs, write_outputs

    params = _gate_params(args)
    inputs = load_inputs(params, args.candidate_eval, args.champion_eval or args.candidate_eval,
                         training_metrics=args.training_metrics, use_dirs=True)
    registry = None
    if args.register:
        from rlvr.tracking.registry import client  # lazy: logging, ~10 ms

        registry = client()
    result = decide_and_register(params, inputs, registry_client=registry)
    write_outputs(result, inputs, gate_json=args.out / "gate.json", report=args.out / "gate.md")
    print(json.dumps({"decision": result.decision, "blocking": result.blocking,
                      "rules": {r.name: r.status for r in result.rules},
                      "registry": result.registry, "gate": str(args.out / "gate.json"),
                      "report": str(args.out / "gate.md")}, indent=2))


def cmd_gate_rollback(args) -> None:
    from rlvr.config import read_params  # lazy: PyYAML, ~20 ms
    from rlvr.gate.params import GateParams, load_params  # lazy: pyarrow, ~0.1 s
    from rlvr.tracking.registry import client, rollback  # lazy: logging, ~10 ms

    params = (load_params(args.params) if args.params.exists()
              and "gate" in read_params(args.params) else GateParams())
    print(json.dumps(rollback(client(), args.model or params.registry.model_name,
                              alias=params.registry.alias, reason=args.reason or ""),
                     sort_keys=True))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlvr", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    tasks = sub.add_parser("tasks", help="inspect and convert task pools")
    tsub = tasks.add_subparsers(dest="tasks_command", required=True)
    t = tsub.add_parser("list", help="one line per task")
    t.add_argument("--tasks", type=_file, required=True)
    t.set_defaults(func=cmd_tasks_list)
    t = tsub.add_parser("show", help="one task's metadata as JSON (or its reference patch)")
    t.add_argument("id")
    t.add_argument("--tasks", type=_file, required=True)
    t.add_argument("--patch", action="store_true",
                   help="print the task's reference patch (a unified diff) instead")
    t.set_defaults(func=cmd_tasks_show)
    t = tsub.add_parser("materialize", help="the agent's view of a task, as a git repo")
    t.add_argument("id")
    t.add_argument("--tasks", type=_file, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.set_defaults(func=cmd_tasks_materialize)
    t = tsub.add_parser("import-swebench", help="SWE-bench instances -> task Parquet")
    t.add_argument("file", type=_file)
    t.add_argument("--repos", type=Path, required=True)
    t.add_argument("--out", type=_file, required=True)
    t.set_defaults(func=cmd_import_swebench)
    t = tsub.add_parser("export-swebench", help="task Parquet -> SWE-bench instances (JSONL)")
    t.add_argument("--tasks", type=_file, required=True)
    t.add_argument("--out", type=_file, required=True)
    t.set_defaults(func=cmd_export_swebench)
    t = tsub.add_parser("check", help="an author's view of one task directory: per-test "
                        "outcomes of the buggy state, the reference and each wrong solution, "
                        "and the curation verdict (exit 0 accepted, 1 rejected)")
    t.add_argument("dir", type=Path)
    t.add_argument("--params", type=_file, default=Path("params.yaml"))
    t.add_argument("--backend", choices=["bwrap", "docker"])
    t.set_defaults(func=cmd_tasks_check)
    t = tsub.add_parser("rejections", help="a curation rejection log, readably")
    t.add_argument("file", type=_file)
    t.set_defaults(func=cmd_tasks_rejections)

    c = sub.add_parser("curate", help="hand-authored task directories -> curated Parquet")
    c.add_argument("--source", type=Path, required=True)
    c.add_argument("--out", type=_file, required=True)
    c.add_argument("--params", type=_file, default=Path("params.yaml"))
    c.add_argument("--backend", choices=["bwrap", "docker"])
    c.set_defaults(func=cmd_curate)

    v = sub.add_parser("verify", help="one patch through the enclave -> one JSON verdict")
    v.add_argument("--tasks", type=_file, required=True)
    v.add_argument("--task-id", required=True)
    v.add_argument("--patch", type=_file, required=True)
    v.add_argument("--backend", choices=["bwrap", "docker"])
    v.add_argument("--seed", type=int)
    v.add_argument("--params", type=_file, default=Path("params.yaml"))
    v.set_defaults(func=cmd_verify)

    g = sub.add_parser("gate", help="release gate: candidate vs champion evaluation -> "
                       "promote / block / inconclusive (SPEC §8)")
    g.add_argument("--candidate-eval", type=Path, help="eval.parquet of the candidate")
    g.add_argument("--champion-eval", type=Path,
                   help="eval.parquet of the champion (default: the candidate's file)")
    g.add_argument("--candidate", help="candidate checkpoint name (default: gate.candidate)")
    g.add_argument("--champion", help="champion checkpoint name (default: gate.champion)")
    g.add_argument("--candidate-dir", type=Path,
                   help="candidate directory: hashed and checked against its evaluation")
    g.add_argument("--champion-dir", type=Path, help="champion directory (likewise)")
    g.add_argument("--training-metrics", type=Path,
                   help="the candidate's training metrics (model card training.json)")
    g.add_argument("--out", type=Path, help="directory for gate.json and gate.md")
    g.add_argument("--register", action="store_true",
                   help="record the decision in the MLflow model registry (moves `champion` "
                   "on promotion)")
    g.add_argument("--params", type=Path, default=Path("params.yaml"))
    gsub = g.add_subparsers(dest="gate_command")
    r = gsub.add_parser("rollback", help="move the champion alias back to the previous "
                        "champion")
    r.add_argument("--model", help="registered model (default: gate.registry.model_name)")
    r.add_argument("--reason", help="recorded in the alias history")
    r.add_argument("--params", type=Path, default=Path("params.yaml"))
    g.set_defaults(func=cmd_gate)

    m = sub.add_parser("metrics", help="the stages' headline metrics, one per line (optionally "
                       "against another revision); --details: every metric")
    m.add_argument("patterns", nargs="*", metavar="PATTERN",
                   help="keep metrics matching these globs, on the key (`*pass_at_1`) or on "
                   "file:key (`reports/stages/gate.json:rules.*` with --details)")
    m.add_argument("--rev", help="a git revision or DVC experiment to compare with")
    m.add_argument("--changed", action="store_true", help="with --rev: only what differs")
    m.add_argument("--details", action="store_true",
                   help="every metric, from the stages' details files (reports/stages/*.json)")
    m.add_argument("--root", type=Path, default=Path("."), help="the DVC project")
    m.set_defaults(func=cmd_metrics)

    pol = sub.add_parser("policy", help="inspect a policy (HF model) directory")
    psub = pol.add_subparsers(dest="policy_cmd", required=True)
    pc = psub.add_parser("check", help="can this model be trained as it is: its template, "
                        "tool-call format, special tokens, a scripted episode through them")
    pc.add_argument("dir", type=Path)
    pc.add_argument("--format", default="auto", help="tool-call format (default: its chat card, "
                   "else what its template declares)")
    pc.add_argument("--thinking", action="store_true", help="render with thinking on")
    pc.add_argument("--json", action="store_true", help="the report as JSON")
    pc.set_defaults(func=cmd_policy_check)
    return p


def cmd_policy_check(args) -> int:
    from rlvr.agent.policy_check import check_policy  # lazy: transformers, ~2 s

    report = check_policy(args.dir, args.format, True if args.thinking else None)
    print(json.dumps(dataclasses.asdict(report), indent=1) if args.json else report.to_text())
    if not report.ok:
        raise RlvrError(f"policy check: {args.dir}: {report.problems[0]}")
    return 0


def cmd_metrics(args) -> None:
    rows = metric_rows(args.root, rev=args.rev, patterns=args.patterns, details=args.details)
    if not rows:
        raise RlvrError("metrics: nothing matches" + (f" {args.patterns}" if args.patterns
                                                     else " (no stage has written metrics)"))
    sys.stdout.write(render(rows, rev=args.rev, changed_only=args.changed))


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): stop quietly, as a tool killed by SIGPIPE
        # would (141 = 128 + SIGPIPE). stdout goes to /dev/null so the interpreter's last
        # flush at exit cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(141) from None
    if status:
        raise SystemExit(status)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
