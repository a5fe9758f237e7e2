"""The session layer: everything that opens a model or a run folder, for the commands above it.

`session.Session` trains (one engine, the trainer, the run folder, the peer node); `engine.open_engine`
is the one way to open an engine; the other modules are the work of the commands that are not a run
(evaluate, doctor, export, convert, identity, the local demo swarm, one node per GPU). Importing this
package is cheap: nothing heavy here.
"""

from swarm_app.peer import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION"]
"""Re-exported for `swarm --version`: the CLI sits above the session and does not reach into the peer layer."""
