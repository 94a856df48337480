"""Reproducibility pipeline for "Structured Initialization for Vision Transformers" (Zheng et al., NeurIPS 2025).

The method library: `pipeline.method` (the initializations, the models, the filter families; torch and timm only).
The pipeline: `pipeline.experiments` (every experiment declared once), `pipeline.training` (a cell's run),
`pipeline.data`, `pipeline.analysis`, `pipeline.scale`. The command line: `python -m pipeline --help`.
"""

__version__ = "0.1.0"
