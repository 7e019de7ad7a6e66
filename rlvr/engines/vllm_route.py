"""Which of several vLLM servers samples a prompt (issue 38: generation across servers).

Why route by prefix: each server keeps its own prefix cache. A GRPO group's G members share
their first prompt, and an episode's next turn extends its last prompt (the transcript only
grows), so sending a prompt to the server that sampled its longest earlier prefix keeps a
whole group, turn after turn, on one server, and that server computes the shared prompt
once. A prompt with no routed prefix (a new group) goes to the live server with the fewest
requests in flight, counting what this call already assigned; equally loaded servers take
new groups in turn (a caller that sends one group per call still spreads them).

Routing never changes a sample: a vLLM request is seeded per sample and depends on its
prompt and its seed only, so any server returns the same ids (logprobs up to float
summation order). That is also why a request of a failed server can be re-queued on another.

Prefixes are found with a polynomial rolling hash of the token ids, every prefix length of
a prompt in one pass. A hash collision can only send a prompt to a server whose cache does
not hold it: a slower request, never a different sample.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

_MOD = (1 << 61) - 1  # a Mersenne prime: the rolling hash stays a Python int below 2**61
_BASE = 1_000_003


def prefix_hashes(tokens: Sequence[int]) -> list[int]:
    """hashes[n] = hash of tokens[:n], for n = 0 .. len(tokens)."""
    out = [0] * (len(tokens) + 1)
    h = 0
    for i, t in enumerate(tokens):
        h = (h * _BASE + int(t) + 1) % _MOD
        out[i + 1] = h
    return out


class PrefixRouter:
    """Server affinities of routed prompts (the newest `capacity` kept) and the choice of a
    server for new ones."""

    def __init__(self, servers: int, capacity: int = 65536) -> None:
        if servers < 1:
            raise ValueError(f"a router needs at least one server, got {servers}")
        self.servers = servers
        self.capacity = capacity
        self._owner: OrderedDict[tuple[int, int], int] = OrderedDict()  # (len, hash) -> server
        self._lengths: dict[int, int] = {}  # prefix length -> how many stored keys have it
        self._turn = 0  # equally loaded servers take new groups in turn

    def _remember(self, key: tuple[int, int], server: int) -> None:
        if key in self._owner:
            self._owner.move_to_end(key)
        else:
            self._lengths[key[0]] = self._lengths.get(key[0], 0) + 1
        self._owner[key] = server
        while len(self._owner) > self.capacity:
            self._drop(next(iter(self._owner)))

    def _drop(self, key: tuple[int, int]) -> None:
        del self._owner[key]
        left = self._lengths[key[0]] - 1
        if left:
            self._lengths[key[0]] = left
        else:
            del self._lengths[key[0]]

    def owner(self, hashes: Sequence[int], live: Sequence[bool]) -> int | None:
        """The live server that sampled the longest routed prefix of a prompt (its
        `prefix_hashes`), or None."""
        n = len(hashes) - 1
        for length in sorted((m for m in self._lengths if m <= n), reverse=True):
            server = self._owner.get((length, hashes[length]))
            if server is not None and live[server]:
                return server
        return None

    def route(self, prompts: Sequence[Sequence[int]], live: Sequence[bool],
              in_flight: Sequence[int]) -> list[int]:
        """A server index for each prompt (see the module docstring). Raises ValueError when
        no server is live."""
        if len(live) != self.servers or len(in_flight) != self.servers:
            raise ValueError(f"{len(live)} live flags / {len(in_flight)} loads for "
                             f"{self.servers} servers")
        if not any(live):
            raise ValueError("no live server to route to")
        load = list(in_flight)
        out = []
        for prompt in prompts:
            hashes = prefix_hashes(prompt)
            server = self.owner(hashes, live)
            if server is None:
                server = min((s for s in range(self.servers) if live[s]),
                             key=lambda s: (load[s], (s - self._turn) % self.servers))
                self._turn = (server + 1) % self.servers
            load[server] += 1
            self._remember((len(prompt), hashes[-1]), server)
            out.append(server)
        return out

    def forget(self, server: int) -> None:
        """Drop every affinity to `server` (it failed or was drained): its groups are
        routed afresh."""
        for key in [k for k, s in self._owner.items() if s == server]:
            self._drop(key)
