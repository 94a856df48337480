"""Weight selection: initialise a small model with a subset of a larger one's weights (state dicts in and out).

Source: Xu et al., "Initializing Models with Larger Ones" (ICLR 2024), as [NeurIPS] Table 4 (Sec. 5.5) uses
it: the student's block i takes the teacher's block i, and along every larger dimension the student keeps evenly
spaced indices, the same rule for every tensor (so a fused qkv keeps the same channels of q, k, v).
Tensors the teacher lacks (the student's head: `head_prefixes`) keep the student's values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from pipeline.errors import PipelineError

BLOCK = re.compile(r"^(blocks\.)(\d+)(\..*)$")


def uniform_indices(teacher: int, student: int) -> Tensor:
    """The `student` evenly spaced indices into a dimension of size `teacher`: arange(s) * (t // s) when s divides
    t, else round(linspace(0, t - 1, s))."""
    if student > teacher:
        raise PipelineError(f"weight selection needs a teacher at least as large as the student: a dimension of"
                            f" {student} cannot be selected from {teacher}")
    if teacher % student == 0:
        return torch.arange(student) * (teacher // student)
    return torch.linspace(0, teacher - 1, student).round().long()


def select_tensor(weight: Tensor, shape: Sequence[int]) -> Tensor:
    if weight.dim() != len(shape):
        raise PipelineError(f"weight selection: a {weight.dim()}-d teacher tensor cannot fill a {len(shape)}-d one")
    out = weight
    for dim, size in enumerate(shape):
        out = out.index_select(dim, uniform_indices(out.shape[dim], size))
    return out


def select_weights(teacher: Mapping[str, Tensor], student: Mapping[str, Tensor],
                   head_prefixes: Sequence[str] = ("head.",)) -> dict[str, Tensor]:
    """The student's state dict filled from the teacher's by layer then element selection; PipelineError where the
    student has more blocks or a tensor the teacher lacks or cannot fill."""
    depth = {int(m.group(2)) for k in teacher if (m := BLOCK.match(k))}
    out = {}
    for key, value in student.items():
        if key.startswith(tuple(head_prefixes)):
            out[key] = value.clone()
            continue
        source = key  # first-N layer selection: block i from block i
        block = BLOCK.match(key)
        if block and int(block.group(2)) not in depth:
            raise PipelineError(f"weight selection: the student's block {block.group(2)} has no teacher block (the"
                                f" teacher has {len(depth)}); layer selection needs a teacher at least as deep")
        if source not in teacher:
            raise PipelineError(f"weight selection: the teacher has no tensor {source!r} for the student's {key!r};"
                                " both must be models of one family (timm ViTs with the same options)")
        weight = teacher[source]
        if key.startswith("patch_embed.") and weight.dim() == 4 and weight.shape[2:] != value.shape[2:]:
            raise PipelineError(f"weight selection: patch size {tuple(value.shape[2:])} of the student against"
                                f" {tuple(weight.shape[2:])} of the teacher; use one patch size")
        if key in ("pos_embed", "cls_token") and weight.shape[:-1] != value.shape[:-1]:
            raise PipelineError(f"weight selection: {key} has {tuple(value.shape[:-1])} tokens in the student and"
                                f" {tuple(weight.shape[:-1])} in the teacher; use one image size, patch size and"
                                " class-token setting (only the width is selected)")
        out[key] = select_tensor(weight, value.shape).to(value.dtype).clone()
    return out


def apply_weight_selection(student: nn.Module, teacher: nn.Module,
                           head_prefixes: Sequence[str] = ("head.",)) -> nn.Module:
    state = select_weights(teacher.state_dict(), student.state_dict(), head_prefixes)
    student.load_state_dict(state)
    return student
