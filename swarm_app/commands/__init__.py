"""One module per `swarm` command: its parser (`add_parser(commands)`) and its handler (`main(args)`).

A command module is cheap to import (argparse and settings): `swarm --version` builds every parser.
The work it hands over to (swarm_app/session/ and the other feature folders) is imported when the
command runs. Flags that set a Settings field are declared in flags.py from the fields' metadata.
cli.py owns the top-level parser, the dispatch and the one-line error handling.
"""
