"""The method's options and their official values, stated once: the method library's keyword defaults and
params.yaml's section defaults. Torch-free.

Sources: code-2505 for `default` and `impulse`; Trockman & Kolter as code-2505 runs it for `mimetic`; code-2401 for
[CI]'s fit (`impulse16_64_5_0.1_100`; Model III at sigma 1.0); code-2404 for [SIA]'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class DefaultOptions:
    """`default` arm: PyTorch's init; code-2505's optional norm rescaling (all 1 = unchanged)."""

    norm_p: float = 1.0  #: multiplies the ViT position embedding
    norm_q: float = 1.0  #: multiplies the q and k rows of every qkv weight
    norm_v: float = 1.0  #: multiplies the v rows and every attention proj weight


@dataclass
class MimeticOptions:
    """Trockman & Kolter 2023: W_q W_k^T ~ alpha_qk Z + beta_qk I, W_v W_o ~ alpha_vo Z - beta_vo I."""

    alpha_qk: float = 0.7
    beta_qk: float = 0.7
    alpha_vo: float = 0.4
    beta_vo: float = 0.4
    #: 'official' = code-2505 (uniform Z; v = L, proj = R, so value-then-proj is (R L)^T, not alpha_vo Z - beta_vo I);
    #: 'paper' = Trockman & Kolter (Gaussian Z; value-then-proj exactly alpha_vo Z - beta_vo I)
    form: Literal["official", "paper"] = "official"
    #: MLP-Mixer only (no official code): the writer of the token map. 'default_gain' = PyTorch default's gain, GELU
    #: nonlinear; 'exact' = the map at its own gain in linear-regime units (`pipeline.method.inits.mixer`)
    mixer: Literal["default_gain", "exact"] = "default_gain"


@dataclass
class ImpulseOptions:
    """The [NeurIPS] method, with code-2505's constants."""

    kernel_size: int = 3  #: odd; f x f impulse offsets
    norm_p: float = 18.0  #: pos_embed multiplier
    norm_q: float = 7.0  #: Frobenius norm of each head's Q and K
    norm_v: float = 1.0  #: V/proj multiplier
    scale: float = 1000.0  #: weight of the impulse in the target
    noise_std: float = 0.6  #: std of the truncated-normal noise off the impulse (times 3)
    offsets: Literal["official", "random"] = "official"  #: code-2505's fixed head order, or random per head
    #: MLP-Mixer only (no official code): 'filter' = a random f x f filter per block at PyTorch default's gain, GELU
    #: nonlinear; 'shift' = one impulse offset per block at unit gain, exact (linear-regime units)
    mixer: Literal["filter", "shift"] = "filter"


@dataclass
class CiFitOptions:
    """code-2401's impulse fit for its Simple ViT (`pipeline.method.ci_2401`)."""

    steps: int = 10000  #: Adam steps per layer
    lr: float = 1e-4
    sigma: float = 0.1  #: softmax scale of the fit, kept as the layer's attention scale
    renorm_every: int = 100  #: steps between rescaling Q's and K's columns to their initial mean norm
    window: int = 5  #: odd; offsets are drawn in the window x window kernel


#: Model III's fit: directly on Q, K (no PE), at the sigma the [CI] text gives.
MODEL3_SIGMA = 1.0


@dataclass
class SiaFitOptions:
    """[SIA]'s impulse fit (code-2404's 'impulse3', `pipeline.method.sia.sia_fit`)."""

    kernel_size: int = 3  #: odd; offsets are drawn in the kernel_size x kernel_size window
    steps: int = 10000  #: Adam steps per fit
    lr: float = 1e-4
    renorm_every: int = 100  #: steps between rescaling Q's and K's columns to their initial mean norm


DEFAULT, MIMETIC, IMPULSE, CI_FIT, SIA_FIT = DefaultOptions(), MimeticOptions(), ImpulseOptions(), CiFitOptions(), \
    SiaFitOptions()
