"""The batched augmentation draws torchvision's distributions and, given the same draws, gives
the pixels of torchvision's per-sample transforms, without handing anything to the host."""

from __future__ import annotations

import math
import platform

import numpy as np
import pytest
import torch
from helpers import HostSyncDetector, HostSyncError
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from pall_avalanche.data import CIFAR10_STATS, TINYIMAGENET_STATS
from pall_avalanche.data.augment import CropFlip, ResizedCropFlip, normalize, resized_crop
from pall_avalanche.data.device import BatchPipeline

#: torchvision resizes uint8 images natively (fixed point, rounded after each pass) on these
#: CPUs (``torchvision.transforms.v2.functional._geometry._do_native_uint8_resize_on_cpu``),
#: which ``ResizedCropFlip.apply`` reproduces exactly; elsewhere in float32, rounded once, which
#: differs by one level on about a fifth of the pixels
NATIVE_UINT8_RESIZE = (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
                       or platform.machine() in ("aarch64", "arm64"))
EQUAL_SHARE = 1.0 if NATIVE_UINT8_RESIZE else 0.75


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_images(n: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, height, width), dtype=torch.uint8,
                         generator=generator(seed))


def draw(augment, n: int, height: int, width: int, seed: int) -> dict[str, torch.Tensor]:
    return augment.draw(n, height=height, width=width, generator=generator(seed), device="cpu")


def chi_square(counts: np.ndarray) -> float:
    """Pearson's statistic of ``counts`` against equal expected counts in every cell."""
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


def test_crop_flip_offsets_are_uniform_and_independent_of_the_flip():
    n, offsets = 90_000, 9                                           # 0 .. 2 · padding
    params = draw(CropFlip(32, 4), n, 32, 32, seed=1)
    top, left, flip = (params[k].numpy() for k in ("top", "left", "flip"))
    assert top.min() == left.min() == 0 and top.max() == left.max() == offsets - 1
    assert flip.dtype == bool

    def statistic(top, left, flip) -> float:        # joint table against the product law
        cells = (top * offsets + left) * 2 + flip
        return chi_square(np.bincount(cells, minlength=offsets * offsets * 2))

    df = offsets * offsets * 2 - 1                               # 161
    threshold = df + 5 * math.sqrt(2 * df)                       # ~ 5 standard deviations
    assert statistic(top, left, flip) < threshold
    # the criterion sees a dependence between the axes, or between an offset and the flip
    assert statistic(top, top, flip) > threshold
    assert statistic(top, left, (top + flip) % 3 == 0) > threshold


@pytest.mark.parametrize("height, width", [(32, 32), (28, 36)])
def test_crop_flip_gives_torchvisions_pixels_for_the_same_draws(height, width):
    augment, n = CropFlip(32, 4), 64
    images = random_images(n, height, width)
    params = draw(augment, n, height, width, seed=2)
    out = augment.apply(images, params)
    assert out.shape == (n, 3, 32, 32) and out.dtype == torch.uint8
    crop = v2.RandomCrop(32, padding=4)
    for i in range(n):
        crop_params, flip = augment.per_sample(params, i)
        expected = crop.transform(images[i], crop_params)
        if flip:
            expected = TF.horizontal_flip(expected)
        assert torch.equal(out[i], expected), f"sample {i}: {crop_params}, flip={flip}"
    assert 0 < int(params["flip"].sum()) < n                     # both kinds were compared
    assert len(set(params["left"].tolist())) > 4 and len(set(params["top"].tolist())) > 2


# (input side, augmentation): boxes around the output size (64: identity or upscaling, 96:
# both), and small boxes (strong upscaling)
RESIZED_CASES = [((64, 64), ResizedCropFlip(64)), ((96, 96), ResizedCropFlip(64)),
                 ((48, 80), ResizedCropFlip(40)),
                 ((64, 64), ResizedCropFlip(64, scale=(0.005, 0.03)))]


@pytest.mark.parametrize("shape, augment", RESIZED_CASES)
def test_resized_crop_flip_gives_torchvisions_pixels_for_the_same_draws(shape, augment):
    (height, width), n, size = shape, 24, augment.size
    images = random_images(n, height, width, seed=3)
    params = draw(augment, n, height, width, seed=4)
    out = augment.apply(images, params)
    floats = resized_crop(images.float() / 255, params, size)
    assert out.shape == floats.shape == (n, 3, size, size) and out.dtype == torch.uint8
    crop = v2.RandomResizedCrop(size, antialias=True)
    equal, worst_float = 0, 0.0
    for i in range(n):
        box, flip = augment.per_sample(params, i)
        expected = crop.transform(images[i], box)
        expected_float = crop.transform(images[i].float() / 255, box)
        if flip:
            expected, expected_float = TF.horizontal_flip(expected), TF.horizontal_flip(
                expected_float)
        assert (out[i].int() - expected.int()).abs().max() <= 1, f"sample {i}: {box}"
        equal += int((out[i] == expected).sum())
        worst_float = max(worst_float, float((floats[i] - expected_float).abs().max()))
    share = equal / out.numel()
    print(f"{shape} -> {size}: {share:.4%} of uint8 pixels equal, float error {worst_float:.2e}")
    assert share >= EQUAL_SHARE
    assert worst_float < 1e-4                                   # on the [0, 1] scale
    assert 0 < int(params["flip"].sum()) < n
    sides = torch.cat([params["height"], params["width"]])
    assert (sides < size).any()                                  # upscaled boxes were compared
    if height > size:
        assert (sides > size).any()                              # and downscaled ones


def boxes_by_rule(n: int, side: int, seed: int, *, log_ratio: bool = True,
                  area_on_side: bool = False) -> dict[str, np.ndarray]:
    """RandomResizedCrop's default boxes on a ``side × side`` image, vectorised here: the
    documented rule, or a wrong one (a uniform ratio; a uniform side instead of area)."""
    g = generator(seed)
    u_area, u_ratio = torch.rand(2, n, 10, generator=g, dtype=torch.float64)
    if area_on_side:
        fraction = (math.sqrt(0.08) + u_area * (1 - math.sqrt(0.08))) ** 2
    else:
        fraction = 0.08 + u_area * 0.92
    low, high = 3 / 4, 4 / 3
    aspect = (torch.exp(math.log(low) + u_ratio * (math.log(high) - math.log(low)))
              if log_ratio else low + u_ratio * (high - low))
    w = torch.round(torch.sqrt(side * side * fraction * aspect)).long()
    h = torch.round(torch.sqrt(side * side * fraction / aspect)).long()
    valid = (w > 0) & (w <= side) & (h > 0) & (h <= side)
    assert valid.any(1).all()
    first = valid.int().argmax(1, keepdim=True)
    h, w = h.gather(1, first)[:, 0], w.gather(1, first)[:, 0]
    u_top, u_left = torch.rand(2, n, generator=g, dtype=torch.float64)
    return {"height": h.numpy(), "width": w.numpy(),
            "top": (u_top * (side - h + 1)).long().numpy(),
            "left": (u_left * (side - w + 1)).long().numpy()}


def largest_ks_distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """The largest two-sample Kolmogorov-Smirnov distance over the box's height, width, top,
    left, area and aspect ratio."""
    def features(box):
        return [box["height"], box["width"], box["top"], box["left"],
                box["height"] * box["width"], box["width"] / box["height"]]

    def ks(x, y) -> float:
        values = np.union1d(x, y)
        cdf = [np.searchsorted(np.sort(s), values, side="right") / len(s) for s in (x, y)]
        return float(np.abs(cdf[0] - cdf[1]).max())

    return max(ks(x, y) for x, y in zip(features(a), features(b), strict=True))


def test_resized_crop_boxes_follow_torchvisions_distribution():
    n, side = 20_000, 64
    ours = {k: v.numpy() for k, v in draw(ResizedCropFlip(64), n, side, side, seed=5).items()}
    crop, image = v2.RandomResizedCrop(64, antialias=True), torch.zeros(3, side, side)
    with torch.random.fork_rng():
        torch.manual_seed(6)
        made = [crop.make_params([image]) for _ in range(n)]
    theirs = {k: np.array([p[k] for p in made]) for k in ("height", "width", "top", "left")}
    critical = 1.95 * math.sqrt(2 / n)                   # two-sample KS at the 0.1 % level
    assert largest_ks_distance(ours, theirs) < critical
    assert largest_ks_distance(boxes_by_rule(n, side, seed=7), theirs) < critical
    # the criterion rejects the wrong rules
    assert largest_ks_distance(boxes_by_rule(n, side, seed=7, log_ratio=False), theirs) > critical
    assert largest_ks_distance(boxes_by_rule(n, side, seed=7, area_on_side=True),
                               theirs) > critical


@pytest.mark.parametrize("shape, scale, ratio", [
    ((21, 30), (0.5, 1.0), (3.5, 6.0)),          # wider ratio than the image: full width
    ((30, 21), (0.5, 1.0), (0.1, 0.29)),         # taller: full height
    ((24, 24), (2.0, 3.0), (3 / 4, 4 / 3)),      # larger than the image: the whole image
])
def test_resized_crop_falls_back_to_torchvisions_central_box(shape, scale, ratio):
    (height, width), n = shape, 16
    augment = ResizedCropFlip(16, scale=scale, ratio=ratio)
    params = draw(augment, n, height, width, seed=8)
    crop = v2.RandomResizedCrop(16, scale=scale, ratio=ratio, antialias=True)
    expected = crop.make_params([torch.zeros(3, height, width)])
    for i in range(n):
        assert augment.per_sample(params, i)[0] == expected
    images = random_images(n, height, width, seed=9)
    out = augment.apply(images, params)
    for i in range(n):
        flipped = TF.horizontal_flip if bool(params["flip"][i]) else (lambda x: x)
        same = out[i] == flipped(crop.transform(images[i], expected))
        assert float(same.float().mean()) >= EQUAL_SHARE


@pytest.mark.parametrize("stats", [CIFAR10_STATS, TINYIMAGENET_STATS])
def test_normalize_is_bit_identical_to_the_per_sample_transforms(stats):
    images = random_images(16, 32, 32, seed=10)
    per_sample = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(*stats)])
    out = normalize(images, *(torch.tensor(v).view(-1, 1, 1) for v in stats))
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.stack([per_sample(image) for image in images]))


def test_draws_and_crops_hand_nothing_to_the_host():
    images = {CropFlip(32, 4): random_images(8, 32, 32), ResizedCropFlip(64): random_images(
        8, 96, 96)}
    results = {}
    with HostSyncDetector() as detector:
        detector.armed = True
        for augment, x in images.items():
            params = draw(augment, len(x), x.shape[-2], x.shape[-1], seed=11)
            results[augment] = (augment.apply(x, params), augment(x, generator(11)))
            if isinstance(augment, ResizedCropFlip):
                resized_crop(x.float(), params, 64)
            BatchPipeline(augment, *CIFAR10_STATS)(x, generator(12))
    for applied, called in results.values():                 # __call__ = apply(draw(...))
        assert torch.equal(applied, called)


def test_the_host_sync_detector_sees_a_conversion():
    with HostSyncDetector() as detector, pytest.raises(HostSyncError):
        detector.armed = True
        draw(CropFlip(32, 4), 4, 32, 32, seed=0)["top"].max().item()
