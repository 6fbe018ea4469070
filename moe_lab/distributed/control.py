"""The control plane: ranks tell each other how a phase went through the rendezvous
store (a TCPStore), not through the data collectives. A store key is not matched by a
sequence number the way a collective is, so a rank that raised, skipped a collective or
timed out in one still reports, and every rank learns every rank's status. A rank that
does not report within the timeout is named in the result (it exited or hangs)."""
from __future__ import annotations

import datetime
import json
import os

import torch.distributed as dist


class RankLost(RuntimeError):
    """A rank stopped reporting; the sweep cannot go on without it."""


def open_store(rank: int, world: int, timeout_s: float):
    """The store of the standard environment contract (MASTER_ADDR, MASTER_PORT): rank 0
    hosts it, unless torchrun's agent already does (TORCHELASTIC_USE_AGENT_STORE)."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(host, port, world, is_master=rank == 0 and not agent,
                          timeout=datetime.timedelta(seconds=max(60.0, timeout_s)))
    return dist.PrefixStore(f"moe-lab/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store)


class Control:
    def __init__(self, store, rank: int, world: int, timeout_s: float):
        self.store, self.rank, self.world, self.timeout_s = store, rank, world, timeout_s
        self.seq = 0
        self.lost: set[int] = set()

    def exchange(self, tag: str, payload) -> list:
        """Every rank's `payload` (JSON-able), in rank order. A rank that has not reported
        within the timeout gives {"status": "failed", "error": ..., "lost": True}."""
        key = f"{self.seq}/{tag}"
        self.seq += 1
        self.store.set(f"{key}/{self.rank}", json.dumps(payload))
        out = []
        for r in range(self.world):
            if r == self.rank:
                out.append(payload)
                continue
            wait = 1.0 if r in self.lost else self.timeout_s
            try:
                self.store.wait([f"{key}/{r}"], datetime.timedelta(seconds=wait))
                out.append(json.loads(self.store.get(f"{key}/{r}")))
            except Exception:
                self.lost.add(r)
                out.append(dict(status="failed", lost=True,
                                error=f"rank {r} did not report within {self.timeout_s:g} s "
                                      "(exited or hangs)"))
        return out
