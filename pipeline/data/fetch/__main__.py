"""`python -m pipeline.data.fetch <dataset>`: the stage fetch@<dataset> (see this package's docstring)."""

import sys

from pipeline import entry
from pipeline.data.fetch import add_arguments, main

sys.exit(entry.command("pipeline.data.fetch", add_arguments, main))
