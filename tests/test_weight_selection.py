"""Weight selection (Xu et al., ICLR 2024): first-N layers, evenly spaced elements, on timm ViTs."""

from __future__ import annotations

import pytest
import timm
import torch

from pipeline.errors import PipelineError
from pipeline.method.weight_selection import apply_weight_selection, select_weights, uniform_indices


def vit(dim: int, depth: int, heads: int, patch: int = 4, seed: int = 0, classes: int = 10,
        img: int = 16) -> torch.nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("vit_tiny_patch16_224", img_size=img, patch_size=patch, embed_dim=dim, depth=depth,
                             num_heads=heads, num_classes=classes, in_chans=1)


def test_uniform_indices_are_evenly_spaced():
    assert uniform_indices(8, 4).tolist() == [0, 2, 4, 6]
    assert uniform_indices(7, 3).tolist() == [0, 3, 6]
    assert uniform_indices(5, 5).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(PipelineError, match="cannot be selected from 4"):
        uniform_indices(4, 6)


def test_the_student_gets_the_teachers_first_blocks_at_evenly_spaced_elements():
    teacher, student = vit(48, 4, 4), vit(24, 2, 2, seed=1, classes=3)
    head = student.head.weight.clone()
    apply_weight_selection(student, teacher)
    t, s = teacher.state_dict(), student.state_dict()
    assert {k: v.shape for k, v in s.items()} == {k: v.shape for k, v in vit(24, 2, 2, classes=3).state_dict().items()}
    keep = torch.arange(24) * 2  # 48 -> 24 channels
    torch.testing.assert_close(s["pos_embed"], t["pos_embed"][..., keep])
    fc1 = t["blocks.1.mlp.fc1.weight"][torch.arange(96) * 2][:, keep]  # 192 -> 96 hidden units
    torch.testing.assert_close(s["blocks.1.mlp.fc1.weight"], fc1)
    qkv = torch.arange(72) * 2  # q, k and v each keep the same channels: 2j of the teacher's 144 rows
    torch.testing.assert_close(s["blocks.0.attn.qkv.weight"], t["blocks.0.attn.qkv.weight"][qkv][:, keep])
    assert torch.equal(qkv[24:48] - 48, qkv[:24]) and torch.equal(qkv[48:] - 96, qkv[:24])
    torch.testing.assert_close(s["patch_embed.proj.weight"], t["patch_embed.proj.weight"][keep])
    assert torch.equal(student.head.weight, head)  # a new head for the student's own classes


def test_a_teacher_of_the_students_size_selects_to_itself():
    teacher, student = vit(24, 2, 2), vit(24, 2, 2, seed=1)
    state = select_weights(teacher.state_dict(), student.state_dict(), head_prefixes=())
    assert all(torch.equal(state[k], v) for k, v in teacher.state_dict().items())


@pytest.mark.parametrize("student, message", [
    (lambda: vit(96, 2, 2), "cannot be selected from 48"),
    (lambda: vit(24, 6, 2), "block 4 has no teacher block"),
    (lambda: vit(24, 2, 2, patch=8), "tokens in the student"),
    (lambda: vit(24, 2, 2, patch=8, img=32), "patch size \\(8, 8\\) of the student"),
])
def test_what_cannot_be_selected_is_named(student, message):
    with pytest.raises(PipelineError, match=message):
        select_weights(vit(48, 4, 4).state_dict(), student().state_dict())
