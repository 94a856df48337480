"""The torchvision class of a registered dataset, through which fetch downloads and verifies it."""

from __future__ import annotations

from collections.abc import Mapping

from torchvision import datasets as tvd

from pipeline.datasets import DatasetInfo


def torchvision_class(info: DatasetInfo, base_url: str | None = None, md5: Mapping[str, str] | None = None) -> type:
    """The torchvision dataset class of `info`; with `base_url` its downloads come from there, with `md5` its
    checksums are replaced by file name."""
    cls = getattr(tvd, info.source.split(":", 1)[1])
    if not base_url and not md5:
        return cls
    return type(cls.__name__, (cls,), _redirected_attributes(cls, base_url and base_url.rstrip("/"), md5 or {}))


def _redirected_attributes(cls: type, base: str | None, md5: Mapping[str, str]) -> dict:
    """Class attributes of `cls` with every URL moved to `base` (file names kept) and the named files' MD5s replaced."""

    def at(url: str) -> str:
        return f"{base}/{url.rsplit('/', 1)[1]}" if base else url

    def pairs(files) -> list:
        return [[f, md5.get(f, m)] for f, m in files]

    if issubclass(cls, tvd.MNIST):
        return {"mirrors": [base + "/"] if base else cls.mirrors, "resources": pairs(cls.resources)}
    if issubclass(cls, tvd.CIFAR10 | tvd.STL10):
        attrs = {"url": at(cls.url), "tgz_md5": md5.get(cls.filename, cls.tgz_md5),
                 "train_list": pairs(cls.train_list), "test_list": pairs(cls.test_list)}
        if issubclass(cls, tvd.CIFAR10):
            attrs["meta"] = {**cls.meta, "md5": md5.get(cls.meta["filename"], cls.meta["md5"])}
        return attrs
    if issubclass(cls, tvd.SVHN):
        return {"split_list": {k: [at(u), f, md5.get(f, m)] for k, (u, f, m) in cls.split_list.items()}}
    if issubclass(cls, tvd.Food101):
        return {"_URL": at(cls._URL), "_MD5": md5.get(cls._URL.rsplit("/", 1)[1], cls._MD5)}
    if issubclass(cls, tvd.Flowers102):
        return {"_download_url_prefix": base + "/" if base else cls._download_url_prefix,
                "_file_dict": {k: (f, md5.get(f, m)) for k, (f, m) in cls._file_dict.items()}}
    if issubclass(cls, tvd.OxfordIIITPet):
        return {"_RESOURCES": tuple((at(u), md5.get(u.rsplit("/", 1)[1], m)) for u, m in cls._RESOURCES)}
    raise ValueError(f"no download location known for {cls.__name__}")
