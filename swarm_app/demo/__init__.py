"""`swarm demo --nodes N`: a local swarm of N training sessions in one process (`local_swarm.py`).

A feature above the session: each node is a `Session` with a peer node of peer/io/local_nodes.py.
commands/demo.py picks the view.
"""
