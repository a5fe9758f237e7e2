"""Being a good guest on the owner's computer: thread counts that adapt (threads.py), resource levels and
the rules that pause training (guest.py). Used by the session; imports nothing above the kernel."""
