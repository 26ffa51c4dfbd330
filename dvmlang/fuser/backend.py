"""The backend protocol: what a ``dvmlang.ops`` operation builds its result on.

Two backends implement it: a capture graph (``@dvmlang.graph``: ``graph.Graph``, whose values are
``GraphValue``) and a lazy session (``dvmlang.lazy()`` and eager ``dvmlang.tensor`` code:
``lazy.session.LazySession``, whose values are ``LazyTensor``). A tensor operand names its backend with
``__dvm_backend__`` (a graph value its graph, a lazy tensor the current session); ``ops`` finds the backend of
an operation's operands and asks it for values (``value``) and result nodes (``node``), so both kinds of value
reach their backend the same way.
"""

from __future__ import annotations


class Backend:
    """Where operations build their results. ``syms`` holds the dimensions (a ``graph.SymTable``) and what has
    been deduced about them."""

    captures = False  # a capture graph: among mixed operands its values decide the backend
    runtime_sizes = False  # sizes are numbers standing for runtime sizes (a lazy session's flush makes them symbols)
    # the source location new nodes get; None: the user's call site (errors.user_loc). A front end that knows
    # better (the torch backend: the FX node's line in the model) sets it while it builds
    loc = None

    def node(self, kind: str, inputs: list, shape: tuple, dtype, attrs: dict):
        """The value of a new operation ``kind`` on ``inputs`` (values of this backend)."""
        raise NotImplementedError

    def value(self, x):
        """``x`` as a value of this backend when it is a tensor this backend takes, else None (``ops`` turns Python
        numbers into constants and refuses the rest)."""
        return None

    def shape_text(self, shape) -> str:
        """A shape as messages spell it."""
        raise NotImplementedError
