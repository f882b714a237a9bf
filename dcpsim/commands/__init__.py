"""CLI sub-commands (one module each; see :mod:`dcpsim.cli`)."""
