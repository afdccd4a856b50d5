"""What reports: a cell's result and its bugs (results.py), the snippets that reproduce them (snippet.py),
failure texts for a terminal (texts.py), the conformance matrix (matrix.py) and report files written
atomically (files.py). Built from results alone: nothing here imports a framework."""
