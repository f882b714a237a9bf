"""``python -m dcpsim ...`` runs the ``dcpsim`` command line."""

import sys

from dcpsim.cli import main

if __name__ == "__main__":
    sys.exit(main())
