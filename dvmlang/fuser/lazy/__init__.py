"""Runtime fusion of eager code: ``dvmlang.tensor`` values and ``with dvmlang.lazy():`` sessions.

Outside a session every operation on a ``dvmlang.tensor`` runs at once, one kernel per operation. Inside
``with dvmlang.lazy() as session:`` operations are only *captured* into a pending graph (concrete shapes, so
Python sees shapes and dtypes at once); the graph is *flushed* — fused with the fuser's rules, encoded and
run as one stacked launch — when something needs its results:

* **observe**: ``.numpy()``, ``np.asarray(t)``, ``float()``, ``int()``, ``bool()`` (a Python ``if``), ``print``,
  ``repr``, ``str``, ``.item()``, ``.tolist()``;
* **unfusible**: an operation the fuser does not take into a pending graph — ``ops.custom`` (a user kernel,
  run as its own launch), indexing ``t[i]`` and partial writes ``t[i] = v`` of a pending value;
* **hazard**: memory that pending work reads or writes is about to be read or written in the wrong order
  (see ``docs/lazy.md`` for the rule);
* **size cap**: the pending graph holds ``max_pending`` nodes;
* **nested** / **exit** / **explicit**: entering a nested session, leaving the block, ``session.flush()``.

Every flush is recorded with its reason in ``session.stats``. Only values that a live Python object still
references (or that an in-place operation writes back) become outputs of a flush; everything else stays
inside its fused kernel and never reaches GM. Values are held in cells (``_Value``) that move from
*pending* (a node of the pending graph) to *in flight* (a submitted batch) to *ready* (an array) or *failed*
(never computed); a flush publishes its results only after its whole launch succeeded.

A flushed graph is made shape-generic before it is compiled: every input dimension size other than 1 becomes
a symbol (equal sizes share one), so the next flush with the same structure and the same equalities reuses
the compiled program and only encodes for the new sizes.

The package, by job: ``memory`` (value cells, storages, read-only guards, what pending work touches),
``flush`` (pending graph -> batch -> program -> launch, the worker thread), ``stats`` (flush records),
``session`` (``dvmlang.lazy()``, the backend ``dvmlang.ops`` builds on), ``tensor`` (``dvmlang.tensor``) and
``runtime`` (the one object that holds the state shared by sessions; ``fresh_runtime()`` gives a new one).
"""

from .runtime import LazyRuntime, current_runtime, fresh_runtime
from .session import LazySession, lazy
from .stats import REASONS, FlushRecord, LazyStats
from .tensor import LazyTensor, tensor

__all__ = ["LazyTensor", "LazySession", "LazyStats", "FlushRecord", "tensor", "lazy", "REASONS", "LazyRuntime",
           "current_runtime", "fresh_runtime"]
