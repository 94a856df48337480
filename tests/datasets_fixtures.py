"""Test data in the formats the data layer reads, generated in milliseconds (tiny images, few of them).

- `make_image_folder(root, ...)`: a user's ImageFolder tree (`datasets: [folder]`): any class count, colour,
  grayscale or mixed, images of mixed sizes and formats (PNG, JPEG, BMP, TIFF, 16-bit and palette PNG).
- `MINIATURES[name]()`: a miniature of every downloadable registered dataset **in its upstream format**:
  the file names, containers and label files that torchvision's dataset class parses, with the `Expected`
  facts (checksums, split sizes, class count) the fetch is checked against.
- `LocalServer`: serves files on 127.0.0.1 (optionally cut short); `one_training_step`: a model built from a
  `DatasetMeta` takes one optimizer step on a batch of the loaders.

Each image's colour encodes its label (`class_colour`), so a test can tell that images and labels stay paired
through the real parsers; the lossless formats (CIFAR, SVHN, STL-10, Fashion-MNIST) instead hold random pixels
that a fetched copy must reproduce exactly (`Miniature.stored`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import io
import json
import pickle
import tarfile
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from pipeline.data.fetch.sources import Expected
from pipeline.data.store import save_split, write_manifest


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# ---------------------------------------------------------------- images


def class_colour(k: int, classes: int, gray: bool = False) -> tuple[int, int, int]:
    """The colour of class k of `classes`: distinct gray levels, or distinct hues, far apart for JPEG."""
    level = 30 + round(k * 190 / max(classes - 1, 1))
    if gray:
        return level, level, level
    return level, 250 - level, (80 + 97 * k) % 256


def encode(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buf.getvalue()


def jpeg(colour: tuple, size: tuple[int, int] = (40, 30)) -> bytes:
    """A solid-colour RGB JPEG of `size` (width, height)."""
    return encode(Image.new("RGB", size, colour), "JPEG")


# ---------------------------------------------------------------- a user's ImageFolder tree

#: (PIL mode, format, file suffix) of grayscale and colour images; the generator cycles through them.
GRAY_KINDS = [("L", "PNG", ".png"), ("L", "JPEG", ".jpg"), ("I;16", "PNG", ".png"), ("L", "BMP", ".bmp"),
              ("P", "PNG", ".png"), ("L", "TIFF", ".tif")]
COLOUR_KINDS = [("RGB", "PNG", ".png"), ("RGB", "JPEG", ".jpeg"), ("RGBA", "PNG", ".png"), ("RGB", "BMP", ".bmp"),
                ("P", "PNG", ".png"), ("RGB", "TIFF", ".tiff")]
SIZES = [(28, 28), (36, 30), (24, 40), (32, 32)]  #: (width, height), cycled


def folder_image(colour: tuple, mode: str, size: tuple[int, int]) -> Image.Image:
    """A solid image of `colour` (an RGB triple; gray when its three values agree) in PIL `mode`."""
    if mode == "I;16":  # 16-bit: the level times 257, so its top 8 bits are the level
        return Image.fromarray(np.full(size[::-1], colour[0] * 257, dtype=np.uint16))
    if mode == "P":  # palette entry 1 holds the colour
        image = Image.new("P", size, 1)
        image.putpalette([0, 0, 0, *colour] + [0] * 762)
        return image
    image = Image.new("RGB", size, colour)
    return image.convert(mode) if mode != "RGB" else image


@dataclass
class FolderSpec:
    """What `make_image_folder` wrote: what fetch and the loaders must find."""

    root: Path
    classes: list[str]
    counts: dict[str, int]  #: images per split
    channels: int
    #: the median (lower) shorter side of the train images, as `pipeline.data.fetch.userdata` takes it (it reads every
    #: image of a folder this size: up to 1,024 per split)
    image_size: int

    def colours(self, k: int) -> list[tuple[int, int, int]]:
        """The colours an image of class k may have (gray images hold its gray level)."""
        return [class_colour(k, len(self.classes), gray=True), class_colour(k, len(self.classes))]


def make_image_folder(root: Path, *, classes: int = 3, train_per_class: int = 4, val_per_class: int = 2,
                      colour: str = "rgb", eval_dir: str = "val", sizes: list = SIZES) -> FolderSpec:
    """Write an ImageFolder tree `root/{train,<eval_dir>}/<class>/<i>.<ext>`: solid images, one colour per class.

    Args:
        classes: how many class folders (named c00, c01, ...).
        train_per_class, val_per_class: images per class folder of each split.
        colour: 'rgb' (colour images: RGB, RGBA, colour-palette; PNG, JPEG, BMP, TIFF), 'gray' (8-bit, 16-bit
            and gray-palette images; the dataset has 1 channel), or 'mixed' (alternating gray and colour images:
            the dataset has 3 channels).
        eval_dir: 'val' or 'test'.
        sizes: (width, height) of the images, cycled, so they come in mixed sizes.
    """
    names = [f"c{k:02d}" for k in range(classes)]
    kinds = {"rgb": [(*k, False) for k in COLOUR_KINDS], "gray": [(*k, True) for k in GRAY_KINDS],
             "mixed": [k for pair in zip(GRAY_KINDS, COLOUR_KINDS) for k in ((*pair[0], True), (*pair[1], False))]}
    counts, shorter, i = {}, [], 0
    for split, n in (("train", train_per_class), (eval_dir, val_per_class)):
        for k, name in enumerate(names):
            (root / split / name).mkdir(parents=True)
            for j in range(n):
                mode, fmt, suffix, gray = kinds[colour][i % len(kinds[colour])]
                size = sizes[i % len(sizes)]
                image = folder_image(class_colour(k, classes, gray=gray), mode, size)
                (root / split / name / f"{j:03d}{suffix}").write_bytes(encode(image, fmt))
                shorter += [min(size)] if split == "train" else []
                i += 1
        counts[split] = n * classes
    return FolderSpec(root, names, counts, 1 if colour == "gray" else 3, sorted(shorter)[(len(shorter) - 1) // 2])


# ---------------------------------------------------------------- a file server on 127.0.0.1


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.requests.append(self.path.rsplit("/", 1)[-1])
        body = self.server.files.get(self.path.rsplit("/", 1)[-1])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = len(body) // 2 if self.server.truncate else len(body)  # truncate: announce all, send half, hang up
        with contextlib.suppress(OSError):  # torchvision's redirect probe closes without reading
            self.wfile.write(body[:cut])
        self.close_connection = True

    def log_message(self, *args):
        pass


class LocalServer:
    """Serves `files` (name -> bytes) at `url`/<name>; `truncate` sends half of each body, then hangs up."""

    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.files, self.httpd.truncate, self.httpd.daemon_threads = {}, False, True
        self.httpd.requests = []  #: the file names asked for, in order
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/files"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def files(self) -> dict[str, bytes]:
        return self.httpd.files

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests

    @property
    def truncate(self) -> bool:
        return self.httpd.truncate

    @truncate.setter
    def truncate(self, value: bool) -> None:
        self.httpd.truncate = value

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---------------------------------------------------------------- miniatures of the registered datasets


@dataclass
class Miniature:
    """A registered dataset in miniature, in its upstream format."""

    name: str
    files: dict[str, bytes]  #: what the server serves, by file name (the canonical names)
    expect: Expected  #: the miniature's checksums, split sizes and class count
    main: str  #: the file the fault tests damage
    stored: dict = field(default_factory=dict)  #: lossless formats: split -> (uint8 images, labels) fetch must store
    gray: bool = False  #: image colours follow class_colour(label, colour_classes, gray)
    colour_classes: int = 3


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _mat(**arrays) -> bytes:
    import scipy.io  # here: a stock PyTorch image (pytest -m gpu) has no scipy

    buf = io.BytesIO()
    scipy.io.savemat(buf, arrays)
    return buf.getvalue()


def _expect(files: dict[str, bytes], sizes: dict[str, int], num_classes: int, **extra) -> Expected:
    return Expected(sizes, num_classes, md5={name: md5(data) for name, data in files.items()}, **extra)


def _cifar(name: str, archive: str, folder: str, batches: dict[str, int], meta: str, label_key: str,
           names_key: str, num_classes: int) -> Miniature:
    """CIFAR-10/100's python version: pickled dicts (data N x 3072 uint8, labels) and a meta dict, in a tar.gz."""
    rng, members, stored = np.random.default_rng(0), {}, {}
    for batch, n in batches.items():
        data, labels = rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, num_classes, n).tolist()
        members[batch] = pickle.dumps({"batch_label": batch, "data": data, label_key: labels, "filenames": []}, 2)
        split = "test" if batch.startswith("test") else "train"
        images, targets = stored.get(split, (torch.empty(0, 3, 32, 32, dtype=torch.uint8), torch.empty(0).long()))
        stored[split] = (torch.cat([images, torch.from_numpy(data).view(-1, 3, 32, 32)]),
                         torch.cat([targets, torch.tensor(labels)]))
    members[meta] = pickle.dumps({names_key: [f"class{i}" for i in range(num_classes)]}, 2)
    files = {archive: _tar_gz({f"{folder}/{k}": v for k, v in members.items()})}
    sizes = {s: len(labels) for s, (_, labels) in stored.items()}
    return Miniature(name, files, _expect({**files, **members}, sizes, num_classes), archive, stored)


def cifar10() -> Miniature:
    batches = {f"data_batch_{i}": 2 for i in range(1, 6)} | {"test_batch": 4}
    return _cifar("cifar10", "cifar-10-python.tar.gz", "cifar-10-batches-py", batches, "batches.meta", "labels",
                  "label_names", 10)


def cifar100() -> Miniature:
    return _cifar("cifar100", "cifar-100-python.tar.gz", "cifar-100-python", {"train": 8, "test": 4}, "meta",
                  "fine_labels", "fine_label_names", 100)


def svhn() -> Miniature:
    """SVHN's cropped digits: train_32x32.mat / test_32x32.mat with X (32 x 32 x 3 x N) and y (N x 1, 10 = digit 0)."""
    rng, files, stored = np.random.default_rng(1), {}, {}
    for split, n in (("train", 8), ("test", 4)):
        images = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        digits = np.arange(n) % 10
        files[f"{split}_32x32.mat"] = _mat(X=images.transpose(2, 3, 1, 0), y=np.where(digits == 0, 10, digits)[:, None])
        stored[split] = (torch.from_numpy(images), torch.from_numpy(digits))
    return Miniature("svhn", files, _expect(files, {"train": 8, "test": 4}, 10), "train_32x32.mat", stored)


def stl10() -> Miniature:
    """STL-10's binary version: stl10_binary/{train,test}_{X,y}.bin (96 x 96 images stored column-major,
    labels 1-10), unlabeled_X.bin, class_names.txt and fold_indices.txt, in a tar.gz."""
    rng, members, stored = np.random.default_rng(2), {}, {}
    for split, n in (("train", 6), ("test", 4), ("unlabeled", 1)):
        images = rng.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8)
        members[f"{split}_X.bin"] = np.ascontiguousarray(images.transpose(0, 1, 3, 2)).tobytes()
        if split != "unlabeled":
            labels = np.arange(n) % 10
            members[f"{split}_y.bin"] = (labels + 1).astype(np.uint8).tobytes()
            stored[split] = (torch.from_numpy(images), torch.from_numpy(labels))
    members["class_names.txt"] = "\n".join(f"class{i}" for i in range(10)).encode() + b"\n"
    members["fold_indices.txt"] = b"0 1 2\n" * 10
    files = {"stl10_binary.tar.gz": _tar_gz({f"stl10_binary/{k}": v for k, v in members.items()})}
    return Miniature("stl10", files, _expect({**files, **members}, {"train": 6, "test": 4}, 10),
                     "stl10_binary.tar.gz", stored)


def flowers102() -> Miniature:
    """Flowers-102: 102flowers.tgz (jpg/image_00001.jpg, ...), imagelabels.mat (1-based labels by image id)
    and setid.mat (trnid / valid / tstid image ids). Classes are torchvision's list of 102 names."""
    labels = [0, 1, 2, 0, 1, 2, 0, 1, 2]  # image ids 1..9: train 1-4, val 5-6, test 7-9
    members = {f"jpg/image_{i:05d}.jpg": jpeg(class_colour(k, 3), SIZES[i % 4]) for i, k in enumerate(labels, 1)}
    files = {"102flowers.tgz": _tar_gz(members),
             "imagelabels.mat": _mat(labels=np.array([labels]) + 1),
             "setid.mat": _mat(trnid=np.array([[1, 2, 3, 4]]), valid=np.array([[5, 6]]), tstid=np.array([[7, 8, 9]]))}
    return Miniature("flowers102", files, _expect(files, {"train": 4, "test": 3}, 102), "102flowers.tgz")


PET_BREEDS = [("Abyssinian", 1), ("american_bulldog", 2), ("american_pit_bull_terrier", 2)]  # (breed, species)


def pets() -> Miniature:
    """Oxford-IIIT Pet: images.tar.gz (images/<Breed>_<n>.jpg) and annotations.tar.gz (annotations/
    trainval.txt, test.txt, list.txt: "<image id> <class id> <species> <breed id>", trimaps/)."""
    images, lines = {}, {"trainval": [], "test": []}
    for k, (breed, species) in enumerate(PET_BREEDS):
        for i in range(1, 5):
            images[f"images/{breed}_{i}.jpg"] = jpeg(class_colour(k, 3), SIZES[i % 4])
            lines["trainval" if i <= 3 else "test"].append(f"{breed}_{i} {k + 1} {species} {k + 1}")
    annotations = {f"annotations/{s}.txt": ("\n".join(v) + "\n").encode() for s, v in lines.items()}
    annotations["annotations/list.txt"] = ("#Image CLASS-ID SPECIES BREED ID\n"
                                           + "\n".join(lines["trainval"] + lines["test"]) + "\n").encode()
    annotations["annotations/trimaps/Abyssinian_1.png"] = encode(Image.new("L", (40, 30), 1), "PNG")
    files = {"images.tar.gz": _tar_gz(images), "annotations.tar.gz": _tar_gz(annotations)}
    return Miniature("pets", files, _expect(files, {"trainval": 9, "test": 3}, 3), "images.tar.gz")


def food101() -> Miniature:
    """Food-101: food-101.tar.gz with images/<class>/<id>.jpg and meta/{train,test}.json ({class: ["class/id"]}),
    meta/classes.txt, labels.txt, train.txt, test.txt."""
    classes, members, meta = ["apple_pie", "baby_back_ribs", "ramen"], {}, {"train": {}, "test": {}}
    for k, cls in enumerate(classes):
        for i in range(4):
            members[f"food-101/images/{cls}/{100 + i}.jpg"] = jpeg(class_colour(k, 3), SIZES[i])
            meta["train" if i < 3 else "test"].setdefault(cls, []).append(f"{cls}/{100 + i}")
    for split, entries in meta.items():
        members[f"food-101/meta/{split}.json"] = json.dumps(entries).encode()
        members[f"food-101/meta/{split}.txt"] = "\n".join(sum(entries.values(), [])).encode() + b"\n"
    members["food-101/meta/classes.txt"] = "\n".join(classes).encode() + b"\n"
    members["food-101/meta/labels.txt"] = "\n".join(c.replace("_", " ").title() for c in classes).encode() + b"\n"
    files = {"food-101.tar.gz": _tar_gz(members)}
    return Miniature("food101", files, _expect(files, {"train": 9, "test": 3}, 3), "food-101.tar.gz")


def tiny_imagenet() -> Miniature:
    """Tiny-ImageNet: tiny-imagenet-200.zip with train/<wnid>/images/*.JPEG (64 x 64), a flat val/images/
    with val/val_annotations.txt (file, wnid, box), test/images/, wnids.txt and words.txt."""
    buf, wnids = io.BytesIO(), ["n01443537", "n01629819", "n01641577"]
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("tiny-imagenet-200/wnids.txt", "\n".join(wnids) + "\n")
        z.writestr("tiny-imagenet-200/words.txt", "\n".join(f"{w}\tthing {w}" for w in wnids) + "\n")
        annotations = []
        for k, wnid in enumerate(wnids):
            for i in range(3):
                z.writestr(f"tiny-imagenet-200/train/{wnid}/images/{wnid}_{i}.JPEG", jpeg(class_colour(k, 3), (64, 64)))
            z.writestr(f"tiny-imagenet-200/train/{wnid}/{wnid}_boxes.txt", "")
            for i in range(2):
                name = f"val_{2 * k + i}.JPEG"
                z.writestr(f"tiny-imagenet-200/val/images/{name}", jpeg(class_colour(k, 3), (64, 64)))
                annotations.append(f"{name}\t{wnid}\t0\t0\t63\t63")
        z.writestr("tiny-imagenet-200/val/val_annotations.txt", "\n".join(annotations) + "\n")
        z.writestr("tiny-imagenet-200/test/images/test_0.JPEG", jpeg((0, 0, 0), (64, 64)))
    files = {"tiny-imagenet-200.zip": buf.getvalue()}
    return Miniature("tiny_imagenet", files, _expect(files, {"train": 9, "val": 6}, 3), "tiny-imagenet-200.zip")


def _idx(array: np.ndarray) -> bytes:
    """The IDX format of MNIST-type files: magic (0, 0, dtype 0x08 = uint8, ndim), big-endian sizes, data."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def fashion_mnist() -> Miniature:
    """Fashion-MNIST's download (no local mirror): four gzipped IDX files; checked by the gzip MD5s and the
    SHA-256 of their content, as the real ones are."""
    rng, raw, stored = np.random.default_rng(3), {}, {}
    for prefix, split, n in (("train", "train", 12), ("t10k", "test", 6)):
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), np.arange(n) % 10
        raw[f"{prefix}-images-idx3-ubyte"], raw[f"{prefix}-labels-idx1-ubyte"] = _idx(images), _idx(labels)
        stored[split] = (torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels))
    files = {f"{k}.gz": gzip.compress(v) for k, v in raw.items()}
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in raw.items()}
    return Miniature("fashion_mnist", files, _expect(files, {"train": 12, "test": 6}, 10, sha256=sha),
                     "train-images-idx3-ubyte.gz", stored)


#: Every downloadable registered dataset's miniature (tests assert none is missing).
MINIATURES = {m.__name__: m for m in (cifar10, cifar100, svhn, stl10, flowers102, pets, food101, tiny_imagenet,
                                      fashion_mnist)}


# ---------------------------------------------------------------- one training step


def one_training_step(loaders, meta) -> float:
    """Build a small CNN with `meta`'s channels and classes, take one SGD step on a train batch; return the loss.

    Fails when the batch does not fit the model the metadata describes, or when nothing learns."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(meta.channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, meta.num_classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = next(iter(loaders.train))
    before = [p.detach().clone() for p in model.parameters()]
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and labels.max() < meta.num_classes
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return loss.item()


def tiny_dataset(root: Path, name: str, sizes: dict[str, int], classes: list[str], seed: int, noise: float,
                 step: float) -> None:
    """`root`/data/<name>: 8 x 8 grey images whose brightness says the class (noise x U(0, 1) + step x class), in the
    store's tensor format; `sizes` maps the train split, then the evaluation split, to their image counts."""
    g = torch.Generator().manual_seed(seed)
    data = root / "data" / name
    data.mkdir(parents=True)
    splits = {}
    for split, n in sizes.items():
        labels = torch.arange(n) % len(classes)
        images = (torch.rand(n, 1, 8, 8, generator=g) * noise + labels[:, None, None, None] * step).to(torch.uint8)
        save_split(data / f"{split}.pt", images, labels)
        splits[split] = {"images": n, "file": f"{split}.pt", "shape": [1, 8, 8]}
    train, evaluate = sizes
    write_manifest(data, {"dataset": name, "num_classes": len(classes), "channels": 1, "image_size": 8,
                          "train_split": train, "eval_split": evaluate, "format": "tensors", "classes": classes,
                          "splits": splits})
