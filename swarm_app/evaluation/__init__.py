"""`swarm eval`: a model, and optionally a run's adapter, scored on the held-out items (`scoring.py`).

A feature above the session: the model opens through swarm_app/session/engine.py, as a run opens it, and
the scoring is training/evaluation.py's, as a run's evaluations are. commands/eval.py prints the result.
"""
