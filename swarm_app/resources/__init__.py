"""Being a good guest on the owner's computer: thread counts that adapt (threads.py), resource levels and
the rules that pause training (guest.py), what the session asks around each round (policy.py) and whether
training waits, and why (pausing.py). Used by the session; imports nothing above the kernel."""
