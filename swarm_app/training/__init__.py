"""The SAPO round loop: tasks -> completions -> rewards -> advantages -> one GRPO update per round."""
