"""The dataset registry: name -> where it comes from and what it is. Pure data, no torch (`pipeline.params`
validates names against `DATASETS`).

Every dataset the papers train on ([NeurIPS] Tables 1-2, [CI] Tables 3-8, [SIA]), the offline default
Fashion-MNIST, `digits` (scikit-learn's bundled 8x8 digits, no download; `fetch` makes a fixed stratified split)
and `folder` (a user's ImageFolder tree). Mean/std are the official recipes' (code-2505, code-2404, code-2401).
Split sizes are the published ones and `fetch` checks them, so a partial copy cannot pass. Which splits the
[NeurIPS] authors used for Flowers, Pets and Food-101 is n/p (neither [NeurIPS] nor code-2505's README says).
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR_CITATION = "Krizhevsky 2009, Learning Multiple Layers of Features from Tiny Images"


@dataclass(frozen=True)
class DatasetInfo:
    """What the pipeline needs to know about a dataset before touching its files."""

    name: str
    #: 'mirror+torchvision:<Class>' (a local mirror, else torchvision's download), 'torchvision:<Class>',
    #: 'url' (an archive we download with torchvision's downloader), 'sklearn:<loader>' (bundled with
    #: scikit-learn, no download), 'user-path' (never downloaded)
    source: str
    num_classes: int  #: 0 = read from the data (`folder`)
    channels: int
    native_size: int  #: side of the stored images (Food-101, Flowers-102, Pets: pre-resized squares, see fetch)
    train_split: str
    eval_split: str
    train_size: int  #: images in the train split; 0 = whatever the user's folder holds
    eval_size: int
    mean: tuple
    std: tuple
    citation: str
    licence: str
    in_memory: bool  #: small enough (<= 100k images of <= 96 px) to train from a uint8 tensor in memory
    homepage: str  #: where a person gets the data by hand
    mirror_safe: bool = True  #: a horizontal flip keeps the label (not for digits: a mirrored 2 is no 2)


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in [
        DatasetInfo(
            "fashion_mnist", "mirror+torchvision:FashionMNIST", 10, 1, 28, "train", "test", 60000, 10000,
            (0.2860,), (0.3530,), "Xiao, Rasul, Vollgraf 2017, arXiv:1708.07747", "MIT", True,
            "https://github.com/zalandoresearch/fashion-mnist"),
        DatasetInfo(
            "digits", "sklearn:load_digits", 10, 1, 8, "train", "val", 1347, 450,
            (0.3053,), (0.3758,), "Alpaydin, Kaynak 1998, Optical Recognition of Handwritten Digits, UCI ML "
            "Repository (the 1,797-image test set, as scikit-learn's load_digits ships it)", "CC BY 4.0", True,
            "https://archive.ics.uci.edu/dataset/80/optical+recognition+of+handwritten+digits", mirror_safe=False),
        DatasetInfo(
            "cifar10", "torchvision:CIFAR10", 10, 3, 32, "train", "test", 50000, 10000,
            (0.4914, 0.4822, 0.4465), (0.2471, 0.2435, 0.2616), CIFAR_CITATION, "unspecified", True,
            "https://www.cs.toronto.edu/~kriz/cifar.html"),
        DatasetInfo(
            "cifar100", "torchvision:CIFAR100", 100, 3, 32, "train", "test", 50000, 10000,
            (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), CIFAR_CITATION, "unspecified", True,
            "https://www.cs.toronto.edu/~kriz/cifar.html"),
        DatasetInfo(
            "svhn", "torchvision:SVHN", 10, 3, 32, "train", "test", 73257, 26032,
            (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970),
            "Netzer et al. 2011, NIPS Workshop on Deep Learning", "non-commercial", True,
            "http://ufldl.stanford.edu/housenumbers/"),
        DatasetInfo(
            "stl10", "torchvision:STL10", 10, 3, 96, "train", "test", 5000, 8000,
            (0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713), "Coates, Ng, Lee 2011, AISTATS",
            "unspecified", True, "https://cs.stanford.edu/~acoates/stl10/"),
        DatasetInfo(
            "food101", "torchvision:Food101", 101, 3, 256, "train", "test", 75750, 25250,
            IMAGENET_MEAN, IMAGENET_STD, "Bossard, Guillaumin, Van Gool 2014, ECCV", "research only", False,
            "https://data.vision.ee.ethz.ch/cvl/datasets_extra/food-101/"),
        DatasetInfo(
            "flowers102", "torchvision:Flowers102", 102, 3, 256, "train", "test", 1020, 6149,
            IMAGENET_MEAN, IMAGENET_STD, "Nilsback, Zisserman 2008, ICVGIP", "unspecified", False,
            "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/"),
        DatasetInfo(
            "pets", "torchvision:OxfordIIITPet", 37, 3, 256, "trainval", "test", 3680, 3669,
            IMAGENET_MEAN, IMAGENET_STD, "Parkhi et al. 2012, CVPR", "CC BY-SA 4.0", False,
            "https://www.robots.ox.ac.uk/~vgg/data/pets/"),
        DatasetInfo(
            "tiny_imagenet", "url", 200, 3, 64, "train", "val", 100000, 10000,
            IMAGENET_MEAN, IMAGENET_STD, "Le, Yang 2015, Tiny ImageNet Visual Recognition Challenge",
            "ImageNet terms", True, "http://cs231n.stanford.edu/tiny-imagenet-200.zip"),
        DatasetInfo(
            "imagenet", "user-path", 1000, 3, 256, "train", "val", 1281167, 50000,
            IMAGENET_MEAN, IMAGENET_STD, "Deng et al. 2009, CVPR; Russakovsky et al. 2015, IJCV",
            "ImageNet terms", False, "https://image-net.org/download.php"),
        DatasetInfo(
            "folder", "user-path", 0, 3, 224, "train", "val", 0, 0,
            IMAGENET_MEAN, IMAGENET_STD, "your own data", "yours", False, "your own data"),
    ]
}


def normalization_stats(name: str, normalization: str) -> tuple[tuple, tuple]:
    """(mean, std) a run normalises dataset `name` with: ImageNet's ('imagenet', the [NeurIPS] small-dataset recipe's)
    or the dataset's own ('dataset')."""
    if normalization == "imagenet":
        return IMAGENET_MEAN, IMAGENET_STD
    return DATASETS[name].mean, DATASETS[name].std
