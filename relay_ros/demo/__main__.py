"""``python -m relay_ros.demo`` (``make demo``): runs `relay_ros.demo.cli.main`.

The command line itself lives in ``cli.py``, so that the package can re-export
`main` without importing this module twice.
"""

from __future__ import annotations

import sys

from relay_ros.demo.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
