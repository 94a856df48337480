"""Reproducibility pipeline for "Structured Initialization for Vision Transformers" (Zheng et al., NeurIPS 2025).

The library: `pipeline.method.inits` (the initialization methods), `pipeline.method.models`, `pipeline.method.filters`,
`pipeline.data`, `pipeline.training.train`, `pipeline.analysis`. The command line: `python -m pipeline --help`.
"""

__version__ = "0.1.0"
