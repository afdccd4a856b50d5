"""The suite's version, in one place: the distribution's metadata (pyproject.toml reads it from here), both
commands' `--version`, and the reports, since a verdict depends on the suite that reached it as much as on the
frameworks' versions."""

VERSION = "0.1.0"
