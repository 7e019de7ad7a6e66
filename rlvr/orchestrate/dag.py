"""The pipeline's DAG as DVC sees it: stages, their upstream edges and metrics files, read
from DVC's own index and graph (no second DAG, no parser of dvc.yaml), and the selection of
stages a run covers. The Prefect flow (flows/pipeline.py) runs what this returns."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rlvr.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DagStage:
    """One pipeline stage as DVC sees it. `upstream`: the stages whose outs it depends on
    (direct edges of DVC's graph); `metrics`: its metrics files, relative to the repo root;
    `params`: the params it reads, as `FILE:KEY` (a key may be a whole section); `outs`: every
    path it writes (outs, metrics, plots), relative to the repo root."""

    name: str
    upstream: tuple[str, ...]
    metrics: tuple[str, ...]
    params: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()


def project_root(root: Path | str | None) -> Path:
    """The repo root; a path to a dvc.yaml means its folder (older callers passed the file)."""
    path = Path(root) if root is not None else REPO_ROOT
    if path.name == "dvc.yaml":
        path = path.parent
    return path.resolve()


def load_dag(root: Path | str | None = None) -> dict[str, DagStage]:
    """The pipeline stages of `root`'s dvc.yaml files in a dependency order (each after all
    its upstream stages; ties in dvc.yaml order), from DVC's index and graph."""
    import networkx as nx
    from dvc.dependency.param import ParamsDependency
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    root = project_root(root)
    if not (root / "dvc.yaml").is_file():
        raise ConfigError(f"{root / 'dvc.yaml'}: cannot read the DAG: no such file")
    try:
        with Repo(str(root), uninitialized=not (root / ".dvc").is_dir()) as repo:
            index = repo.index
            stages = [s for s in index.stages if isinstance(s, PipelineStage)]
            graph = index.graph  # DVC's edges point from a stage to the stages it depends on
            position = {s: i for i, s in enumerate(stages)}
            upstream_graph = graph.reverse(copy=True).subgraph(stages)
            order = nx.lexicographical_topological_sort(upstream_graph, key=position.get)
            dag = {}
            for stage in order:
                ups = sorted((u for u in graph.successors(stage) if u in position),
                             key=position.get)
                name = _address(stage, root)
                dag[name] = DagStage(
                    name=name, upstream=tuple(_address(u, root) for u in ups),
                    metrics=tuple(_relative(m.fs_path, root) for m in stage.metrics),
                    params=tuple(f"{d.def_path}:{key}" for d in stage.deps
                                 if isinstance(d, ParamsDependency) for key in d.params),
                    outs=tuple(_relative(o.fs_path, root) for o in stage.outs))
            return dag
    except DvcException as exc:
        raise ConfigError(f"{root / 'dvc.yaml'}: cannot read the DAG: {exc}") from None


def _address(stage, root: Path) -> str:
    """How `dvc repro` run in `root` names the stage: `name` for root's dvc.yaml, else
    `sub/dvc.yaml:name` (DVC's own `addressing` is relative to the current directory)."""
    file = Path(stage.path).resolve()
    return stage.name if file.parent == root else f"{_relative(str(file), root)}:{stage.name}"


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def stage_order(root: Path | str | None = None) -> list[str]:
    """Stage names of `root`'s DAG in dependency order (`dvc repro`'s order for the DAG)."""
    return list(load_dag(root))


def select_stages(dag: dict[str, DagStage], targets: Sequence[str] | None,
                  with_upstream: bool = False) -> list[str]:
    """The stages to run, in DAG order. None/empty = all. An unknown name is a ConfigError
    naming it. `with_upstream` adds every stage a target depends on (`dvc repro TARGET`)."""
    if not targets:
        return list(dag)
    unknown = [t for t in targets if t not in dag]
    if unknown:
        raise ConfigError(f"unknown stage(s) {', '.join(map(repr, unknown))} "
                          f"(dvc.yaml has: {', '.join(dag)})")
    chosen = set(targets)
    if with_upstream:
        todo = list(targets)
        while todo:
            for up in dag[todo.pop()].upstream:
                if up not in chosen:
                    chosen.add(up)
                    todo.append(up)
    return [name for name in dag if name in chosen]


def stages_needing(dag: dict[str, DagStage], overrides: Sequence[str]) -> list[str]:
    """The stages a run under `-S` overrides (`[FILE:]KEY=VALUE`) must include for its
    metrics to be the overrides' own: every stage reading an overridden key (or a section
    holding it) and every stage downstream of one, in DAG order."""
    keys = []
    for item in overrides:
        target = item.split("=", 1)[0].lstrip("+~")
        file, _, key = target.rpartition(":")
        keys.append((file or "params.yaml", key))

    def reads(stage: DagStage) -> bool:
        for param in stage.params:
            file, _, held = param.rpartition(":")
            for ofile, key in keys:
                if file == ofile and (key == held or key.startswith(held + ".")
                                      or held.startswith(key + ".")):
                    return True
        return False

    needed = {name for name, stage in dag.items() if reads(stage)}
    for name, stage in dag.items():  # DAG order: upstream first
        if any(u in needed for u in stage.upstream):
            needed.add(name)
    return [name for name in dag if name in needed]


def stage_target(root: Path, name: str) -> str:
    """Stage `name` as a DVC target from any working directory (DVC resolves a bare name
    against the current one): `ROOT/dvc.yaml:name`, or `ROOT/sub/dvc.yaml:name`."""
    file, _, stage = name.rpartition(":")
    return f"{root / (file or 'dvc.yaml')}:{stage}"


def stage_changes(root: Path | str | None, name: str) -> list[str] | None:
    """What DVC's status finds changed in stage `name` alone (`Repo.status([name])`, as
    `dvc status NAME`: its deps, outs, params or command against dvc.lock), [] when it is up
    to date, i.e. `dvc repro --single-item NAME` would skip it; None when DVC cannot tell."""
    from dvc.repo import Repo

    root = project_root(root)
    try:
        with Repo(str(root)) as repo:
            status = repo.status(targets=[stage_target(root, name)])
    except Exception:  # noqa: BLE001 - a report's detail must never fail the stage
        return None
    changes: list[str] = []
    for entries in status.values():
        for entry in entries:
            changes.extend(entry if isinstance(entry, dict) else [str(entry)])
    return sorted(set(changes))
