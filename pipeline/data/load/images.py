"""How the loaders open a user's image (`folder`, ImageNet-1K): with the channels its manifest records."""

from __future__ import annotations

import numpy as np
from PIL import Image


def open_image(path: str, channels: int) -> Image.Image:
    """Load an image as 'L' (channels 1) or 'RGB' (channels 3): ImageFolder's loader for user datasets."""
    with Image.open(path) as image:
        if image.mode.startswith("I;16"):  # 16-bit grayscale: PIL's convert would clip it to 0..255
            image = Image.fromarray((np.asarray(image) >> 8).astype(np.uint8))
        return image.convert("L" if channels == 1 else "RGB")


class FolderLoader:
    """`open_image` with the manifest's channels, as a picklable callable (DataLoader workers need one)."""

    def __init__(self, channels: int):
        self.channels = channels

    def __call__(self, path: str) -> Image.Image:
        return open_image(path, self.channels)
