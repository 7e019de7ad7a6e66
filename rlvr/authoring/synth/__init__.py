"""Synthetic task generation by bug injection (SPEC §2). The bug operators themselves
(`rlvr.tasks.operators`, over `rlvr.tasks.spans`) sit below, in what a task is: the scripted
teacher inverts them too.

    seeds.py            seed families on disk (`data/seed_repos/<family>/`)
    corpus_families.py  the real-library corpus as seed families (their upstream suites)
    candidates.py       (family, module, function, operator, site) candidates, sampling, pairing
    public_tests.py     the hidden tests shown in the workspace, cut out by AST
    instructions.py     issue-style instructions from failures probed in the sandbox
    probe_driver.py     the stand-alone script that probe runs inside the sandbox
    cache.py            suite-run sharing across the tasks of one family
    pipeline.py         candidates -> suite runs -> tasks -> curation -> yield
    run.py              one run as the `synthesize` stage does it: params, known pools, enclave
"""
