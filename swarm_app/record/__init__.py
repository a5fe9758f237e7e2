"""A participant's record of a run (kernel/record.py), folded from its metrics.jsonl rows (ledger.py)."""
