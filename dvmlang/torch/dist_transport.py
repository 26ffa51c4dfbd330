"""How the ranks of a ``"dvmlang"`` process group hand each other their data: through torch's own store (the
rendezvous ``init_process_group`` made: TCPStore under torchrun, across processes and machines), or, for ranks
that are threads of one process, through the simulated ``System`` they share.

Both give ``exchange`` (every member hands in an item and gets every member's, in group order) and ``put``/``get``
(point to point). A rank that fails tells its peers (``fail``): whoever waits for it gets a ``PeerError`` naming it
instead of a hang; a peer that never comes gives a ``CollectiveTimeout`` naming it.
"""

from __future__ import annotations

import json
import struct
import time
from datetime import timedelta

import ml_dtypes
import numpy as np

from ..errors import CollectiveTimeout, PeerError

_BF16 = np.dtype(ml_dtypes.bfloat16)


def _dtype(name: str) -> np.dtype:
    return _BF16 if name == "bfloat16" else np.dtype(name)


def pack(header: dict, arrays: list) -> bytes:
    """``header`` (JSON) and ``arrays`` (raw bytes) as one blob: no pickle, nothing run when it is read."""
    head = dict(header)
    head["_arrays"] = [[a.dtype.name, list(a.shape)] for a in arrays]
    text = json.dumps(head).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)


def unpack(blob: bytes) -> tuple[dict, list]:
    (n,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8:8 + n])
    pos = 8 + n
    arrays = []
    for name, shape in header.pop("_arrays"):
        dt = _dtype(name)
        count = int(np.prod(shape)) if shape else 1
        arrays.append(np.frombuffer(blob, dtype=dt, count=count, offset=pos).reshape(shape).copy())
        pos += count * dt.itemsize
    return header, arrays


class StoreTransport:
    """Through a ``torch.distributed.Store`` (one per group: the ``PrefixStore`` the group was made with). Each
    item is a key of its own; the last rank to read a collective's keys deletes them."""

    def __init__(self, store, rank: int, size: int, global_ranks, timeout_s: float):
        self.store = store
        self.rank = rank
        self.size = size
        self.global_ranks = list(global_ranks)
        self.timeout_s = timeout_s
        self._sent: dict = {}
        self._got: dict = {}
        try:
            self.store.set_timeout(timedelta(seconds=max(timeout_s, 1.0)))
        except (AttributeError, RuntimeError):
            pass

    def _name(self, group_rank: int) -> str:
        return f"rank {self.global_ranks[group_rank]}"

    def _await(self, keys: dict, what: str) -> dict:
        """Wait for ``keys`` (key -> group rank) and read them; a failure a peer posted, a peer that finished, or
        the timeout ends the wait with an error naming the ranks."""
        try:
            return self._poll(keys, what)
        except (RuntimeError, OSError) as e:  # the store went away (its host, rank 0 or torchrun's agent, ended)
            raise PeerError(f"{self._name(self.rank)}: {what} cannot complete: the rendezvous store is gone "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); the process hosting "
                            "it (rank 0 under env://, the torchrun agent) may have ended") from None

    def _poll(self, keys: dict, what: str) -> dict:
        got: dict = {}
        left = dict(keys)
        deadline = time.monotonic() + self.timeout_s
        pause = 0.0005
        while left:
            for k in [k for k in left if self.store.check([k])]:
                got[k] = self.store.get(k)
                del left[k]
            if not left:
                break
            if self.store.check(["abort"]):
                raise PeerError(f"{self._name(self.rank)}: {what} cannot complete: "
                                f"{self.store.get('abort').decode(errors='replace')}")
            gone = [r for r in left.values() if self.store.check([f"finished/{r}"])]
            if gone:
                raise PeerError(f"{self._name(self.rank)}: {what} cannot complete: "
                                f"{', '.join(self._name(r) for r in gone)} finished without taking part")
            if time.monotonic() > deadline:
                raise CollectiveTimeout(f"{self._name(self.rank)}: {what} timed out after {self.timeout_s:g} s "
                                        f"waiting for {', '.join(self._name(r) for r in sorted(set(left.values())))}"
                                        " (it may have failed, hung, or called a different sequence of collectives)")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return got

    def exchange(self, seq: int, item: tuple, what: str) -> list:
        header, arrays = item
        self.store.set(f"c{seq}/{self.rank}", pack(header, arrays))
        keys = {f"c{seq}/{r}": r for r in range(self.size) if r != self.rank}
        got = self._await(keys, what)
        out = [unpack(got[f"c{seq}/{r}"]) if r != self.rank else (header, arrays) for r in range(self.size)]
        if self.store.add(f"c{seq}/read", 1) == self.size:  # the last reader cleans up
            for r in range(self.size):
                self.store.delete_key(f"c{seq}/{r}")
            self.store.delete_key(f"c{seq}/read")
        return out

    def put(self, dst: int, tag, item: tuple) -> None:
        n = self._sent[(dst, tag)] = self._sent.get((dst, tag), 0) + 1
        self.store.set(f"p{self.rank}>{dst}/{tag}/{n}", pack(*item))

    def get(self, src: int, tag, what: str) -> tuple:
        n = self._got[(src, tag)] = self._got.get((src, tag), 0) + 1
        key = f"p{src}>{self.rank}/{tag}/{n}"
        blob = self._await({key: src}, what)[key]
        self.store.delete_key(key)
        return unpack(blob)

    def fail(self, message: str) -> None:
        try:
            self.store.set("abort", message.encode())
        except Exception:  # noqa: BLE001 - the store may be gone already; nothing more to tell
            pass

    def finish(self) -> None:
        try:
            self.store.set(f"finished/{self.rank}", b"1")
        except Exception:  # noqa: BLE001 - as above
            pass


class ThreadTransport:
    """For ranks that are threads of one process (``dvmlang.torch.distributed.run``): items go through the shared
    ``System``'s rendezvous, copied when handed in (a rank writes its result into its own tensors while another
    may still be reading the items)."""

    def __init__(self, system, group_id: str, rank: int, global_ranks):
        self.system = system
        self.group_id = group_id
        self.rank = rank
        self.global_ranks = list(global_ranks)
        self._sent: dict = {}
        self._got: dict = {}

    def exchange(self, seq: int, item: tuple, what: str) -> list:
        header, arrays = item
        item = (dict(header), [np.array(a, copy=True) for a in arrays])
        me = self.global_ranks[self.rank]
        return self.system.exchange((self.group_id, seq), me, self.global_ranks, item, what)

    def put(self, dst: int, tag, item: tuple) -> None:
        n = self._sent[(dst, tag)] = self._sent.get((dst, tag), 0) + 1
        header, arrays = item
        key = ("p2p", self.group_id, self.rank, dst, tag, n)
        self.system._slots[key] = (dict(header), [np.array(a, copy=True) for a in arrays])
        self.system._changed()

    def get(self, src: int, tag, what: str) -> tuple:
        n = self._got[(src, tag)] = self._got.get((src, tag), 0) + 1
        key = ("p2p", self.group_id, src, self.rank, tag, n)
        me, peer = self.global_ranks[self.rank], self.global_ranks[src]
        self.system.block(me, lambda: key in self.system._slots, what, [peer])
        return self.system._slots.pop(key)

    def fail(self, message: str) -> None:
        pass  # the system's spmd records the failure for every waiting rank

    def finish(self) -> None:
        pass
