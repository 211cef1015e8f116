"""Where pip took a package from, read from the reports of `pip install --report FILE` (stdlib only: setup.sh runs it
before judge is installed).

    python scripts/pip_origin.py torch REPORT.json [REPORT.json ...]

prints the URL of the file pip installed for the package (the last report that installed it wins), or says that
none of these installs fetched it (it was already installed, or no report was written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def origin(package: str, reports: list[Path]) -> str:
    """The URL pip downloaded `package` from, in the last report that installed it; else a sentence saying so."""
    found = None
    for path in reports:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for item in data.get("install", []):
            name = (item.get("metadata") or {}).get("name", "")
            if name.lower().replace("_", "-") == package.lower():
                found = (item.get("download_info") or {}).get("url") or found
    if found is None:
        return f"no download of {package} in this setup (it was installed already)"
    return found


if __name__ == "__main__":
    print(origin(sys.argv[1], [Path(p) for p in sys.argv[2:]]))
