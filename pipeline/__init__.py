"""Reproducibility pipeline for "Structured Initialization for Vision Transformers" (Zheng et al., NeurIPS 2025).

The library: `pipeline.inits` (the initialization methods), `pipeline.models`, `pipeline.filters`,
`pipeline.data`, `pipeline.train`, `pipeline.analysis`. The command line: `python -m pipeline --help`.
"""

__version__ = "0.1.0"
