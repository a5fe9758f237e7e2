"""`swarm identity`: this node's key shown, exported and imported (`key.py`); the key itself is kept by
swarm_app/peer/core/identity.py.
"""
