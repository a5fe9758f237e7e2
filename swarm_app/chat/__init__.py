"""`swarm chat` and the TUI's chat view: talk to a run's current adapter, or to the untouched base model.

A chat only reads a run folder (run.json, the newest complete checkpoint), never locks or writes it, and
answers with an engine of its own, so a node training in the same folder goes on undisturbed. `run.py`
reads the folder, `talk.py` opens the engine and answers, `questions.py` draws the tasks' questions,
`lines.py` holds the terminal and JSON-lines conversations, `child.py` the TUI's side of one.
"""
