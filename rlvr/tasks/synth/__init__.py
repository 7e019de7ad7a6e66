"""Synthetic task generation by bug injection (SPEC §2).

    seeds.py         seed families on disk (`data/seed_repos/<family>/`)
    spans.py         byte-exact rewriting of AST node spans
    operators.py     the mutation-operator registry + `function_mutants` (used by curation)
    candidates.py    (family, module, function, operator, site) candidates, sampling, pairing
    public_tests.py  the hidden tests shown in the workspace, cut out by AST
    instructions.py  issue-style instructions from failures probed in the sandbox
    probe_driver.py  the stand-alone script that probe runs inside the sandbox
    cache.py         suite-run sharing across the tasks of one family
    pipeline.py      the whole stage: candidates -> suite runs -> tasks -> curation -> yield
"""
