"""The dataset registry: name -> where it comes from and what it is. Pure data, no torch, no I/O.

Every dataset the papers train on ([NeurIPS] Table 1/2, [CI] Tables 3-8), our offline default
Fashion-MNIST, and `folder` (a user's ImageFolder tree). Mean/std are the values the official recipes use
(paper.md section 3): ImageNet's for the [NeurIPS] small-dataset recipe, the dataset's own for [CI]/[SIA].
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class DatasetInfo:
    """What the pipeline needs to know about a dataset before touching its files."""

    name: str
    source: str  #: 'torchvision:<Class>', 'mirror+torchvision:<Class>', 'user-path', 'url'
    num_classes: int
    channels: int
    native_size: int  #: side of the stored images (typical side for variable-size sets)
    train_split: str
    eval_split: str
    mean: tuple
    std: tuple
    citation: str
    licence: str
    in_memory: bool  #: small enough (<= 100k images of <= 96 px) to train from a uint8 tensor in memory


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in [
        DatasetInfo("fashion_mnist", "mirror+torchvision:FashionMNIST", 10, 1, 28, "train", "test",
                    (0.2860,), (0.3530,), "Xiao, Rasul, Vollgraf 2017, arXiv:1708.07747", "MIT", True),
        DatasetInfo("cifar10", "torchvision:CIFAR10", 10, 3, 32, "train", "test",
                    (0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616),
                    "Krizhevsky 2009, Learning Multiple Layers of Features from Tiny Images", "unspecified", True),
        DatasetInfo("cifar100", "torchvision:CIFAR100", 100, 3, 32, "train", "test",
                    (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762),
                    "Krizhevsky 2009, Learning Multiple Layers of Features from Tiny Images", "unspecified", True),
        DatasetInfo("svhn", "torchvision:SVHN", 10, 3, 32, "train", "test",
                    (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970),
                    "Netzer et al. 2011, NIPS Workshop on Deep Learning", "non-commercial", True),
        DatasetInfo("stl10", "torchvision:STL10", 10, 3, 96, "train", "test",
                    (0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713),
                    "Coates, Ng, Lee 2011, AISTATS", "unspecified", True),
        DatasetInfo("food101", "torchvision:Food101", 101, 3, 512, "train", "test",
                    IMAGENET_MEAN, IMAGENET_STD, "Bossard, Guillaumin, Van Gool 2014, ECCV", "research only",
                    False),
        DatasetInfo("flowers102", "torchvision:Flowers102", 102, 3, 500, "train", "test",
                    IMAGENET_MEAN, IMAGENET_STD, "Nilsback, Zisserman 2008, ICVGIP", "unspecified", False),
        DatasetInfo("pets", "torchvision:OxfordIIITPet", 37, 3, 500, "trainval", "test",
                    IMAGENET_MEAN, IMAGENET_STD, "Parkhi et al. 2012, CVPR", "CC BY-SA 4.0", False),
        DatasetInfo("tiny_imagenet", "url", 200, 3, 64, "train", "val",
                    IMAGENET_MEAN, IMAGENET_STD, "Le, Yang 2015, Tiny ImageNet Visual Recognition Challenge",
                    "ImageNet terms", False),
        DatasetInfo("imagenet", "user-path", 1000, 3, 256, "train", "val",
                    IMAGENET_MEAN, IMAGENET_STD, "Deng et al. 2009, CVPR; Russakovsky et al. 2015, IJCV",
                    "ImageNet terms", False),
        DatasetInfo("folder", "user-path", 0, 3, 224, "train", "val",
                    IMAGENET_MEAN, IMAGENET_STD, "your own data", "yours", False),
    ]
}
