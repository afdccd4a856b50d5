"""What reports: a cell's result and its bugs (results.py), the snippets that reproduce them (snippet.py),
what a run prints (terminal.py), failure texts (texts.py), arrays written as literals (literals.py), the name a
snippet calls the function by (callee.py), the conformance matrix (matrix.py), report files written
atomically (files.py), what JSON and HTML carry (data.py), the HTML page (html.py) and its gradient-weight figure
(weights.py), the lines that rebuild a function passed by value (binding.py), and a standard output that may be
closed early (closed_stdout.py). Built from results alone: nothing here imports a framework."""
