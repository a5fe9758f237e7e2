"""`python -m swarm_app` is the same as the `swarm` command."""

from swarm_app.cli import main

raise SystemExit(main())
