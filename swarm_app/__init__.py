"""swarm-app: one SAPO node. Generates answers to verifiable tasks, shares them as text, trains a LoRA.

Importing this package must stay cheap: no torch, textual, mlx or llama_cpp here.
"""

__version__ = "0.1.0"
