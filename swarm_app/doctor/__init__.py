"""`swarm doctor`: what this machine has, which engine runs here and why, what is missing (`report.py`).

A feature above the session: it opens a model only through swarm_app/session/engine.py (`--pace`), and
commands/doctor.py prints what it builds. Nothing below the commands imports it.
"""
