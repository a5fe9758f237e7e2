"""The session layer: a training session and what opening one needs, for the features and commands above it.

`session.Session` trains (one engine, the trainer, the run folder, the peer node); `engine.open_engine` is
the one way any command opens an engine (with `model.resolve` and the model's `recommendations`); the rest
are the session's own parts (its run folder, its peer node, its event bus, the solo curve it compares with).
The commands' other work lives in feature folders above this one (doctor/, evaluation/, export/,
identity/, demo/, multi_gpu/). Importing this package is cheap: nothing heavy here.
"""

from swarm_app.peer import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION"]
"""Re-exported for `swarm --version`: the CLI sits above the session and does not reach into the peer layer."""
