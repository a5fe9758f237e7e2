"""`swarm run --gpus`: one `swarm run` process per GPU, started and watched from one command
(`processes.py`). It imports no session: each GPU's node is a process of its own.
"""
