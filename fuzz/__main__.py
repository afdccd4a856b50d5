import os
import sys

# Worker processes share a GPU: JAX must not reserve 75% of its memory in each (nor in this parent).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from fuzz.cli import main

sys.exit(main())
