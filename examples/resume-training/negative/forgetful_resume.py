"""Negative controls: resumes that restore the model and the step but forget part of the state.

    python negative/forgetful_resume.py --forget optimizer|rng|optimizer,rng --checkpoint weights/checkpoint.pt \
        --features sample/features.npy --targets sample/targets.npy --steps 20 --output OUT

The same code as app/resume.py (imported from it), with Run.restore told to skip the optimizer's state,
the random generators' states, or both. Its outputs are committed under negative/<case>/ so the unit
tests can show that the dossier's checks fail on them. Never part of the image's command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

from resume import parser, resume


def main() -> None:
    cli = parser()
    cli.add_argument("--forget", required=True, help="comma-separated: optimizer, rng")
    args = cli.parse_args()
    forget = set(args.forget.split(","))
    unknown = forget - {"optimizer", "rng"}
    if unknown:
        raise SystemExit(f"--forget: unknown part(s) {sorted(unknown)}")
    result = resume(args, optimizer="optimizer" not in forget, rng="rng" not in forget)
    print(json.dumps(result | {"forgot": sorted(forget)}))


if __name__ == "__main__":
    main()
