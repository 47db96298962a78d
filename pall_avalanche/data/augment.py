"""Batched training augmentation of ``uint8`` images on their device: the CIFAR and Tiny
ImageNet transforms of the per-sample path (torchvision's ``RandomCrop(32, padding=4)``,
``RandomResizedCrop(64)`` and ``RandomHorizontalFlip``) drawn for a whole batch at once and
applied as tensor operations, with no value handed to the host.

Each augmentation draws its parameters (:meth:`CropFlip.draw`) from a generator on the
images' device, with torchvision's distributions, and applies them (:meth:`CropFlip.apply`);
:meth:`CropFlip.per_sample` gives one sample's draw in the form torchvision's own transforms
take, so the two paths can be compared pixel for pixel. :func:`normalize` is the per-sample
path's ``ToDtype`` + ``Normalize`` on a batch (the same values bit for bit).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from torchvision.transforms.v2 import functional as TF

__all__ = ["CropFlip", "ResizedCropFlip", "normalize", "resized_crop"]


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``uint8`` images → float32 in [0, 1] → ``(x − mean) / std`` per channel: the arithmetic
    of the per-sample ``ToDtype(float32, scale=True)`` and ``Normalize(mean, std)`` (so the
    same values bit for bit), with the statistics already on the images' device (torchvision's
    ``normalize`` copies them there on every call, which waits for a GPU).

    :param images: ``(..., C, H, W)`` uint8.
    :param mean: float32 per-channel means, shaped ``(C, 1, 1)``, on the images' device.
    :param std: float32 per-channel standard deviations, likewise.
    """
    return TF.to_dtype(images, torch.float32, scale=True).sub_(mean).div_(std)


def _flips(n: int, generator: torch.Generator, device) -> torch.Tensor:
    """Independent fair coins, ``RandomHorizontalFlip(p=0.5)``'s rule (flip iff U < 0.5)."""
    return torch.rand(n, generator=generator, device=device) < 0.5


class CropFlip:
    """``RandomCrop(size, padding)`` (zero padding) then ``RandomHorizontalFlip()``, batched.

    :param size: the output side (32 for CIFAR).
    :param padding: zero padding on every side before cropping (4 for CIFAR).
    """

    def __init__(self, size: int = 32, padding: int = 4) -> None:
        self.size, self.padding = size, padding

    def __repr__(self) -> str:
        return f"CropFlip(size={self.size}, padding={self.padding})"

    def draw(self, n: int, *, height: int, width: int, generator: torch.Generator, device
             ) -> dict[str, torch.Tensor]:
        """Per sample: ``top`` and ``left``, the crop's offsets in the padded image, each
        uniform on 0 .. H + 2·padding − size (0 .. 8 for CIFAR), and ``flip``; all
        independent, as ``RandomCrop.make_params`` and ``RandomHorizontalFlip`` draw them.

        :param n: the number of samples.
        :param height: the images' height H.
        :param width: the images' width W.
        :param generator: the source of every random number (on ``device``).
        :param device: where the parameters are made.
        """
        pad = 2 * self.padding
        return {"top": torch.randint(0, height + pad - self.size + 1, (n,),
                                     generator=generator, device=device),
                "left": torch.randint(0, width + pad - self.size + 1, (n,),
                                      generator=generator, device=device),
                "flip": _flips(n, generator, device)}

    def apply(self, images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The crops (flipped where drawn) of a ``(B, C, H, W)`` batch, ``(B, C, size, size)``
        of the same dtype, gathered from the zero-padded batch by index arithmetic."""
        p, device = self.padding, images.device
        padded = F.pad(images, (p, p, p, p))
        steps = torch.arange(self.size, device=device)
        rows = params["top"][:, None] + steps
        cols = params["left"][:, None] + torch.where(params["flip"][:, None],
                                                     steps.flip(0), steps)
        batch = torch.arange(len(images), device=device)[:, None, None, None]
        channel = torch.arange(images.shape[1], device=device)[None, :, None, None]
        return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        params = self.draw(len(images), height=images.shape[-2], width=images.shape[-1],
                           generator=generator, device=images.device)
        return self.apply(images, params)

    def per_sample(self, params: dict[str, torch.Tensor], i: int) -> tuple[dict, bool]:
        """Sample ``i``'s draw as the parameters ``v2.RandomCrop(size, padding).transform``
        takes (what its ``make_params`` returns), and whether it is flipped. For tests: it
        reads the values on the host."""
        p = self.padding
        return ({"needs_crop": True, "top": int(params["top"][i]),
                 "left": int(params["left"][i]), "height": self.size, "width": self.size,
                 "needs_pad": p > 0, "padding": [p, p, p, p]}, bool(params["flip"][i]))


def _resize_weights(start: torch.Tensor, length: torch.Tensor, size: int, extent: int
                    ) -> torch.Tensor:
    """``(B, size, extent)`` float64: row i of sample b holds the weights with which output
    pixel i averages the pixels of the box ``[start, start + length)`` along one axis of
    length ``extent``, as torch's antialiased bilinear resize (``align_corners=False``)
    computes them: a triangle filter centred at ``scale · (i + 0.5)`` in box coordinates,
    its support widened by the downscaling factor ``scale = length / size`` when above 1,
    weights normalised per output pixel."""
    scale = (length.double() / size)[:, None, None]                   # input px per output px
    invscale = torch.where(scale >= 1, 1.0 / scale, torch.ones_like(scale))
    center = scale * (torch.arange(size, device=start.device, dtype=torch.float64)[:, None]
                      + 0.5)
    pixel = (torch.arange(extent, device=start.device, dtype=torch.float64)
             - start.double()[:, None, None])                         # in box coordinates
    weights = (1 - ((pixel - center + 0.5) * invscale).abs()).clamp(min=0)
    weights = weights * ((pixel >= 0) & (pixel < length.double()[:, None, None]))
    return weights / weights.sum(-1, keepdim=True)


def _box_weights(params: dict[str, torch.Tensor], size: int, height: int, width: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(Wy, Wx) of the boxes in ``params``, ``(B, size, H)`` and ``(B, size, W)``, the rows
    of Wx reversed for flipped samples."""
    wy = _resize_weights(params["top"], params["height"], size, height)
    wx = _resize_weights(params["left"], params["width"], size, width)
    return wy, torch.where(params["flip"][:, None, None], wx.flip(1), wx)


def resized_crop(images: torch.Tensor, params: dict[str, torch.Tensor], size: int
                 ) -> torch.Tensor:
    """The boxes of :meth:`ResizedCropFlip.draw` cut from a floating-point ``(B, C, H, W)``
    batch and resized to ``size × size`` (flipped where drawn) as one linear map per
    sample, ``Wy · image · Wxᵀ``, in the images' dtype: what torchvision's ``resized_crop``
    (antialiased bilinear) gives each floating-point image, up to float rounding (on a GPU
    allowing TF32 matmuls, to TF32's precision)."""
    wy, wx = _box_weights(params, size, images.shape[-2], images.shape[-1])
    wy, wx = wy.to(images.dtype), wx.to(images.dtype)
    return wy[:, None] @ images @ wx.transpose(1, 2)[:, None]


#: The candidate bit counts of the fixed-point weights of torch's ``uint8`` resize (0 .. 21).
_BITS = 22


def _resample_uint8(images: torch.Tensor, weights: torch.Tensor, axis: int) -> torch.Tensor:
    """One pass of torch's native ``uint8`` antialiased resize along ``axis`` (-1: width, -2:
    height) of a float64 batch holding ``uint8`` values: each sample's weights in fixed
    point, ``floor(0.5 + w · 2**p)`` with p the most bits (up to 22) that keep its largest
    weight below 2**15, integer sums (exact in float64), then ``(sum + 2**(p−1)) >> p``
    clamped to 0 .. 255: the pixels of the per-sample resize of each ``uint8`` image."""
    largest = weights.amax(dim=(1, 2))[:, None]
    bits = torch.arange(1, _BITS + 1, device=weights.device, dtype=torch.float64)
    precision = (torch.floor(0.5 + largest * torch.exp2(bits)) < 2 ** 15).sum(1)  # a prefix
    unit = torch.exp2(precision.double())[:, None, None]
    fixed = torch.floor(0.5 + weights * unit)                          # weights are >= 0
    sums = images @ fixed.transpose(1, 2)[:, None] if axis == -1 else fixed[:, None] @ images
    unit = unit[:, None]
    return torch.floor((sums + unit / 2) / unit).clamp_(0, 255)


class ResizedCropFlip:
    """``RandomResizedCrop(size, scale, ratio, antialias=True)`` then
    ``RandomHorizontalFlip()``, batched.

    :param size: the output side (64 for Tiny ImageNet).
    :param scale: range of the crop's area as a fraction of the image's.
    :param ratio: range of the crop's aspect ratio (width / height), drawn log-uniformly.
    """

    ATTEMPTS = 10

    def __init__(self, size: int = 64, scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> None:
        self.size, self.scale, self.ratio = size, tuple(scale), tuple(ratio)
        # torchvision's bounds: the logs of the float32 ratios
        self._log_ratio = tuple(float(v) for v in torch.log(torch.tensor(self.ratio)))

    def __repr__(self) -> str:
        return f"ResizedCropFlip(size={self.size}, scale={self.scale}, ratio={self.ratio})"

    def draw(self, n: int, *, height: int, width: int, generator: torch.Generator, device
             ) -> dict[str, torch.Tensor]:
        """Per sample, ``RandomResizedCrop.make_params`` vectorised: 10 attempts of an area
        ``H·W·U(scale)`` and an aspect ratio ``exp(U(log ratio))`` (both uniforms float32,
        as torchvision draws them), giving w = round(√(area · aspect)) and h = round(√(area /
        aspect)) in float64, rounded half to even as Python's ``round``; the first attempt
        with 0 < w ≤ W and 0 < h ≤ H wins, its box placed uniformly (``top`` in 0 .. H − h,
        ``left`` in 0 .. W − w); with none, torchvision's central fallback box. Then
        ``flip``. Parameters as :meth:`CropFlip.draw`'s."""
        shape = (n, self.ATTEMPTS)
        area = height * width * torch.empty(shape, device=device).uniform_(
            *self.scale, generator=generator).double()
        aspect = torch.exp(torch.empty(shape, device=device).uniform_(
            *self._log_ratio, generator=generator)).double()
        w = torch.round(torch.sqrt(area * aspect)).long()
        h = torch.round(torch.sqrt(area / aspect)).long()
        fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = fits.to(torch.uint8).argmax(1, keepdim=True)          # the first that fits
        found = fits.any(1)
        fallback_h, fallback_w = self._fallback(height, width)
        h = torch.where(found, h.gather(1, first).squeeze(1), fallback_h)
        w = torch.where(found, w.gather(1, first).squeeze(1), fallback_w)
        u = torch.rand((2, n), generator=generator, device=device, dtype=torch.float64)
        top = torch.minimum((u[0] * (height - h + 1)).long(), height - h)
        left = torch.minimum((u[1] * (width - w + 1)).long(), width - w)
        return {"top": torch.where(found, top, (height - h) // 2),
                "left": torch.where(found, left, (width - w) // 2),
                "height": h, "width": w, "flip": _flips(n, generator, device)}

    def _fallback(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) of torchvision's central crop when no attempt fits: the whole image, or
        its largest central box of the nearest allowed ratio."""
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            return int(round(width / min(self.ratio))), width
        if in_ratio > max(self.ratio):
            return height, int(round(height * max(self.ratio)))
        return height, width

    def apply(self, images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The boxes of a ``(B, C, H, W)`` ``uint8`` batch resized to ``size × size`` (flipped
        where drawn), ``uint8``: per sample, a horizontal then a vertical pass with the
        weights of :func:`resized_crop` in the fixed-point arithmetic of torch's native
        ``uint8`` resize, which torchvision uses on CPUs with AVX2 (or on ARM): the
        per-sample path's pixels exactly there, within one level of its float path
        elsewhere."""
        wy, wx = _box_weights(params, self.size, images.shape[-2], images.shape[-1])
        rows = _resample_uint8(images.double(), wx, axis=-1)
        return _resample_uint8(rows, wy, axis=-2).to(torch.uint8)

    def __call__(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        params = self.draw(len(images), height=images.shape[-2], width=images.shape[-1],
                           generator=generator, device=images.device)
        return self.apply(images, params)

    def per_sample(self, params: dict[str, torch.Tensor], i: int) -> tuple[dict, bool]:
        """Sample ``i``'s draw as the parameters ``v2.RandomResizedCrop(size).transform``
        takes (``make_params``'s ``top``, ``left``, ``height``, ``width``), and whether it is
        flipped. For tests: it reads the values on the host."""
        return ({key: int(params[key][i]) for key in ("top", "left", "height", "width")},
                bool(params["flip"][i]))
