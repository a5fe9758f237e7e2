"""One module per `swarm` command: its parser (`add_parser(commands)`) and its handler (`main(args)`).

A command module is cheap to import (argparse and settings): `swarm --version` builds every parser.
The work it hands over to (session.py, demo_command.py, doctor_command.py, ...) is imported when the
command runs. Flags that set a Settings field are declared in flags.py from the fields' metadata.
cli.py owns the top-level parser, the dispatch and the one-line error handling.
"""
