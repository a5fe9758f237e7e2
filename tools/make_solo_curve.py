"""Write the solo curve shipped beside the bundled model (`assets/models/swarm-tiny/solo_curve.json`), which the
benefit meter compares a node with when its user has no solo run of their own (session/solo.py).

Made only from the committed `swarm experiment` result, never by hand: the solo config's cells in
`benchmarks/results/experiment/cells/` (per-round engine CPU, held-out points of every node), its `base.json`
(round 0) and `experiment.json` (model, held-out items, the settings the run learnt with; a node with other
learning settings is not compared with it). The curve is built by the same code the app uses on a user's own
experiment (session/solo_cells.py).

    python tools/make_solo_curve.py [--experiment benchmarks/results/experiment] [--out assets/models/swarm-tiny]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from swarm_app.session.solo import SHIPPED
from swarm_app.session.solo_cells import solo_curve_from_cells

ROOT = Path(__file__).resolve().parents[1]


def make(experiment: Path) -> dict:
    setup = json.loads((experiment / "experiment.json").read_text())
    base = json.loads((experiment / "base.json").read_text())
    solo = json.loads((experiment / "summary.json").read_text())["solo_config"]
    cells = [json.loads(path.read_text()) for path in sorted((experiment / "cells").glob("*.json"))]
    where = experiment.resolve().relative_to(ROOT) if experiment.resolve().is_relative_to(ROOT) else experiment
    curve = solo_curve_from_cells(setup, base, cells, f"the app's benchmark ({where})", solo)
    if curve is None:
        raise SystemExit(f"{experiment}: no solo curve with engine CPU in the cells of {solo}")
    return {"model": setup["model"], "preset": setup["settings"]["tasks"]["preset"], "settings": setup["settings"],
            "made_by": "tools/make_solo_curve.py", "nodes": setup["nodes"], **dataclasses.asdict(curve)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", type=Path, default=ROOT / "benchmarks" / "results" / "experiment")
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "models" / "swarm-tiny")
    args = parser.parse_args()
    path = args.out / SHIPPED
    path.write_text(json.dumps(make(args.experiment), indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
