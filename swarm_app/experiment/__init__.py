"""`swarm experiment`: the SAPO paper's local/external table, measured on this machine.

A grid of cells, one per (I/J config, seed): each cell runs N training sessions at once in this process
(a local swarm of real peer nodes on 127.0.0.1 when J > 0, offline nodes when J = 0) and is written to
the output folder when it finishes, so a killed experiment continues with the missing cells.
`plan.py` (the grid and each node's settings), `cell.py` (one cell), `store.py` (the folder),
`summary.py` (the metrics), `table.py` (table.md), `plots.py` (the PNGs), `runner.py` (the whole run and
its progress). This package sits at the session layer's height: commands/experiment.py holds the flags
and prints; nothing here prints.
"""
