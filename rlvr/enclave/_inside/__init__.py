"""Code that runs *inside* the enclave sandbox (mounted read-only at /opt/rlvr-enclave).

Standard library and pytest only: nothing here may import rlvr, because the sandbox sees
neither the repository nor the rest of the host. `server.py` is the fork-server entry
point; `runner.py` is what each forked verdict child executes.
"""
