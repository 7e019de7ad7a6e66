"""Candidate bugs: (family, module, function, operator, site) -> a mutated repository state.

Enumeration is exhaustive and deterministic (families, modules and functions in name/source
order, sites in source order); sampling then keeps at most a budget per (family, operator),
drawn round-robin across functions so one long function cannot take a family's whole
budget. Combined candidates (two bugs) are paired from single candidates that already proved
non-equivalent, so both halves of a combined task are real bugs.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass

from rlvr.authoring.synth.seeds import SeedFamily
from rlvr.tasks.operators import OPERATORS, SINGLE_OPERATORS, FunctionContext, Site, compiles, \
    function_mutants, function_names
from rlvr.tasks.spans import SourceMap, overlaps

GENERATOR = "rlvr.synth/1"  # bump when operators change what a given site produces


@dataclass(frozen=True)
class Part:
    """One injected bug: a site of an operator in function `function` of repo file `file`."""

    file: str
    function: str
    site: Site

    @property
    def key(self) -> str:
        return json.dumps([self.file, self.function, self.site.operator, self.site.params],
                          sort_keys=True)


@dataclass(frozen=True)
class Candidate:
    family: str
    operator: str                 # a single operator's name, or "combined"
    parts: tuple[Part, ...]

    @property
    def params(self) -> dict:
        if self.operator != "combined":
            return dict(self.parts[0].site.params)
        same = len({(p.file, p.function) for p in self.parts}) == 1
        return {"scope": "same_function" if same else "two_functions",
                "parts": [{"file": p.file, "function": p.function,
                           "operator": p.site.operator, **p.site.params} for p in self.parts]}

    @property
    def files(self) -> list[str]:
        return sorted({p.file for p in self.parts})

    @property
    def functions(self) -> list[str]:
        return list(dict.fromkeys(f"{p.file}:{p.function}" for p in self.parts))

    def provenance(self, family: SeedFamily, seed: int) -> dict:
        first = self.parts[0]
        extra = {}
        if family.not_passing_on_seed:  # curation quarantines these
            extra["not_passing_on_seed"] = list(family.not_passing_on_seed)
        if family.dropped_modules:
            extra["dropped_hidden_modules"] = list(family.dropped_modules)
        return {
            "generator": GENERATOR,
            "family": self.family,
            "file": first.file,
            "function": first.function,
            "operator": self.operator,
            "params": self.params,
            "seed": seed,
            "seed_repo_hash": family.content_hash,
            **extra,
        }

    def task_id(self, family: SeedFamily) -> str:
        """Stable id from what the bug *is* (not from the sampling seed): the same mutant
        drawn by two runs with different seeds is the same task."""
        ident = json.dumps([GENERATOR, self.family, family.content_hash, self.operator,
                            [p.key for p in self.parts]], sort_keys=True)
        return f"syn-{self.family}-{hashlib.sha256(ident.encode()).hexdigest()[:10]}"

    def state(self, family: SeedFamily) -> dict[str, str]:
        """The mutated repo files (everything else byte-identical to the seed)."""
        by_file: dict[str, list] = defaultdict(list)
        for p in self.parts:
            by_file[p.file].extend(p.site.edits)
        out = dict(family.repo_files)
        for path, edits in by_file.items():
            out[path] = SourceMap(out[path]).apply(edits)
        return out

    def invalid_reason(self, family: SeedFamily, state: dict[str, str]) -> str | None:
        for path in self.files:
            if state[path] == family.repo_files[path]:
                return f"{path}: mutation leaves the file unchanged"
            if not compiles(state[path], path):
                return f"{path}: mutant does not compile"
        return None


def enumerate_parts(family: SeedFamily, operators: tuple[str, ...] = SINGLE_OPERATORS
                    ) -> dict[str, list[Part]]:
    """operator -> every site in the family's library code, in file / source order."""
    out: dict[str, list[Part]] = {op: [] for op in operators}
    for path in family.modules:
        source = family.repo_files[path]
        try:
            names = function_names(source)
        except SyntaxError as exc:
            raise ValueError(f"{family.name}/{path}: seed module does not parse: {exc}") from None
        for qualname in names:
            fn = FunctionContext(source, qualname)
            for op in operators:
                out[op].extend(Part(path, qualname, s) for s in OPERATORS[op](fn))
    return out


def _rng(seed: int, *labels: str) -> random.Random:
    return random.Random(":".join([str(seed), *labels]))


def sample_round_robin(parts: list[Part], budget: int, rng: random.Random,
                       prefer: frozenset[str] = frozenset()) -> list[Part]:
    """Up to `budget` parts, spread evenly over functions (each function's sites shuffled,
    then one per function per round, functions in a shuffled order). Parts whose `key` is in
    `prefer` go first within their function, and functions holding one go first in each
    round (both orders stay shuffled within their rank)."""
    groups: dict[tuple[str, str], list[Part]] = defaultdict(list)
    for p in parts:
        groups[(p.file, p.function)].append(p)
    keys = sorted(groups)
    rng.shuffle(keys)
    for k in keys:
        rng.shuffle(groups[k])
        groups[k].sort(key=lambda p: p.key not in prefer)  # stable: shuffled within ranks
    keys.sort(key=lambda k: groups[k][0].key not in prefer)
    chosen: list[Part] = []
    depth = 0
    while len(chosen) < budget and any(depth < len(groups[k]) for k in keys):
        for k in keys:
            if depth < len(groups[k]) and len(chosen) < budget:
                chosen.append(groups[k][depth])
        depth += 1
    return chosen


def sibling_keys(family: SeedFamily, *, limit: int, seed: int) -> frozenset[str]:
    """Part keys of the mutants curation will try as wrong solutions of each function
    (`function_mutants(seed module, function, limit, seed)`, rule 3)."""
    keys = set()
    if limit <= 0:
        return frozenset()
    for path in family.modules:
        source = family.repo_files[path]
        for qualname in function_names(source):
            for m in function_mutants(source, qualname, limit=limit, seed=seed):
                keys.add(Part(path, qualname, Site(m.operator, m.params, m.edits)).key)
    return frozenset(keys)


def single_candidates(family: SeedFamily, *, per_operator: int, seed: int,
                      operators: tuple[str, ...] = SINGLE_OPERATORS,
                      prefer: frozenset[str] = frozenset()) -> list[Candidate]:
    """Sampled single-bug candidates of one family, deterministic in (family, seed).

    `prefer` (e.g. `sibling_keys`) ranks some sites first: a candidate that is also one of
    curation's wrong solutions for its function pays one suite run for both jobs. The
    per-operator budgets and the one-per-function-per-round spread are unchanged; the
    preferred sites are themselves a seeded uniform sample of every function's sites."""
    parts = enumerate_parts(family, operators)
    out = []
    for op in operators:
        for part in sample_round_robin(parts[op], per_operator, _rng(seed, family.name, op),
                                       prefer):
            out.append(Candidate(family.name, op, (part,)))
    return out


def combined_candidates(family: SeedFamily, proven: list[Candidate], *, budget: int,
                        seed: int) -> list[Candidate]:
    """Two-bug candidates from `proven` single candidates (non-equivalent ones): half within
    one function (different operators, non-overlapping edits), half across two functions."""
    if budget <= 0 or len(proven) < 2:
        return []
    rng = _rng(seed, family.name, "combined")
    singles = sorted((c.parts[0] for c in proven), key=lambda p: p.key)
    by_fn: dict[tuple[str, str], list[Part]] = defaultdict(list)
    for p in singles:
        by_fn[(p.file, p.function)].append(p)
    same = [(a, b) for group in (by_fn[k] for k in sorted(by_fn))
            for i, a in enumerate(group) for b in group[i + 1:]
            if a.site.operator != b.site.operator and not overlaps(a.site.edits, b.site.edits)]
    want_same = min(len(same), (budget + 1) // 2)
    pairs = [same[i] for i in sorted(rng.sample(range(len(same)), want_same))]
    seen = {(a.key, b.key) for a, b in pairs}
    fn_keys = sorted(by_fn)
    attempts = 0
    while len(pairs) < budget and len(fn_keys) > 1 and attempts < 50 * budget:
        attempts += 1
        f1, f2 = rng.sample(fn_keys, 2)
        a, b = sorted((rng.choice(by_fn[f1]), rng.choice(by_fn[f2])), key=lambda p: p.key)
        if (a.key, b.key) not in seen:
            seen.add((a.key, b.key))
            pairs.append((a, b))
    return [Candidate(family.name, "combined", (a, b)) for a, b in pairs]
