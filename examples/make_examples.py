"""Make the app's example photos: public-domain portraits, degraded on purpose.

    .venv/bin/python examples/make_examples.py            # downloads two wheels with pip
    .venv/bin/python examples/make_examples.py --wheels DIR   # or reuse wheels already in DIR

The source photos ship inside two PyPI wheels, so they come from a package
registry with a pinned version and a checked hash, and nothing new becomes a
runtime dependency (the wheels are opened as zip files, never installed):

- ``skimage/data/astronaut.png`` in scikit-image 0.26.0: Eileen Collins, NASA
  Great Images database; "no known copyright restrictions, released into the
  public domain" (scikit-image's ``data.astronaut`` docstring).
- ``matplotlib/mpl-data/sample_data/grace_hopper.jpg`` in matplotlib 3.11.2:
  Commodore Grace M. Hopper, an official U.S. Navy photograph (work of the U.S.
  federal government, public domain); the JPEG's own comment names its source,
  https://commons.wikimedia.org/wiki/File:Grace_Hopper.jpg

Every degradation is deterministic (fixed seeds, fixed JPEG qualities), so a
rerun with the same Pillow/libjpeg writes the same files. Outputs are small
JPEGs (< 200 kB each) written next to this script.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Source:
    """One public-domain photo inside a pinned wheel, checked by its sha256."""

    requirement: str  # what `pip download` fetches
    wheel_prefix: str  # how the wheel's file name starts
    member: str  # path of the photo inside the wheel
    sha256: str  # of the photo itself (the wheel's hash differs per platform)


SOURCES = {
    "astronaut": Source(
        "scikit-image==0.26.0",
        "scikit_image-0.26.0-",
        "skimage/data/astronaut.png",
        "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
    ),
    "hopper": Source(
        "matplotlib==3.11.2",
        "matplotlib-3.11.2-",
        "matplotlib/mpl-data/sample_data/grace_hopper.jpg",
        "a8ca6d734765703b09728ab47fe59f473d93ae3967fc24c7c0288c3c7adb7130",
    ),
}

MAX_BYTES = 200_000


def fetch_wheels(dest: Path) -> None:
    """Download the pinned wheels into ``dest`` with pip (no dependencies, nothing installed)."""
    missing = [s for s in SOURCES.values() if not any(dest.glob(f"{s.wheel_prefix}*.whl"))]
    if not missing:
        return
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest)]
    subprocess.run(cmd + [s.requirement for s in missing], check=True)


def read_photo(src: Source, wheels: Path) -> Image.Image:
    """The source photo as RGB, after checking it is exactly the file documented above."""
    found = sorted(wheels.glob(f"{src.wheel_prefix}*.whl"))
    if not found:
        raise SystemExit(f"no {src.wheel_prefix}*.whl in {wheels}; run without --wheels to download it")
    with zipfile.ZipFile(found[0]) as zf:
        data = zf.read(src.member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != src.sha256:
        raise SystemExit(f"{src.member} in {found[0].name} has sha256 {digest}, expected {src.sha256}")
    return Image.open(io.BytesIO(data)).convert("RGB")


# ------------------------------------------------------------- degradations


def _noise(img: Image.Image, sigma: float, seed: int) -> Image.Image:
    a = np.asarray(img, dtype=np.float32)
    a = a + np.random.default_rng(seed).normal(0.0, sigma, a.shape).astype(np.float32)
    return Image.fromarray(np.clip(a + 0.5, 0, 255).astype(np.uint8))


def _jpeg(img: Image.Image, quality: int) -> Image.Image:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def _faded(img: Image.Image, strength: float = 0.7) -> Image.Image:
    """An old print: sepia toned, lower contrast, lifted blacks."""
    g = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
    tone = np.stack([g * 1.0, g * 0.86, g * 0.68], axis=2)
    a = np.asarray(img, dtype=np.float32) / 255.0
    out = (1 - strength) * a + strength * tone
    out = 0.12 + 0.76 * out
    return Image.fromarray((out * 255 + 0.5).astype(np.uint8))


def low_resolution(photos: dict[str, Image.Image]) -> Image.Image:
    """The astronaut at a quarter of the size, blown back up, then a low-quality JPEG."""
    a = photos["astronaut"]
    small = a.resize((128, 128), Image.Resampling.BICUBIC)
    return _jpeg(small.resize((384, 384), Image.Resampling.BICUBIC), 45)


def blur_and_noise(photos: dict[str, Image.Image]) -> Image.Image:
    """A black-and-white close-up of the astronaut's head, out of focus with sensor noise
    (a different framing and colour from ``low_resolution``, so the two thumbnails differ)."""
    head = photos["astronaut"].crop((110, 0, 390, 280)).resize((448, 448), Image.Resampling.BICUBIC)
    a = head.convert("L").convert("RGB").filter(ImageFilter.GaussianBlur(2.5))
    return _noise(a, 10.0, seed=1)


def heavy_jpeg(photos: dict[str, Image.Image]) -> Image.Image:
    """Grace Hopper downscaled 3x and saved twice at very low JPEG quality (blocking, ringing)."""
    h = photos["hopper"]
    small = h.resize((h.width // 3, h.height // 3), Image.Resampling.BILINEAR)
    return _jpeg(_jpeg(small.resize(h.size, Image.Resampling.BILINEAR), 18), 25)


def faded_pair(photos: dict[str, Image.Image]) -> Image.Image:
    """Both portraits side by side as a faded, soft, grainy old print: two faces in one photo."""
    height = 300
    tiles = [p.resize((round(p.width * height / p.height), height), Image.Resampling.LANCZOS) for p in (photos["astronaut"], photos["hopper"])]
    pair = Image.new("RGB", (sum(t.width for t in tiles) + 24, height + 16), (235, 228, 214))
    x = 8
    for t in tiles:
        pair.paste(t, (x, 8))
        x += t.width + 8
    pair = _faded(pair).filter(ImageFilter.GaussianBlur(1.4))
    return _noise(pair, 7.0, seed=2)


OUTPUTS: dict[str, tuple[Callable[[dict[str, Image.Image]], Image.Image], int]] = {
    "astronaut_low_resolution.jpg": (low_resolution, 70),
    "astronaut_blur_noise.jpg": (blur_and_noise, 60),
    "hopper_heavy_jpeg.jpg": (heavy_jpeg, 85),
    "pair_faded_print.jpg": (faded_pair, 55),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, help="folder holding (or receiving) the two wheels; default: a temporary folder")
    p.add_argument("--out", type=Path, default=HERE, help="where to write the JPEGs (default: examples/)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpen-examples-") as tmp:
        wheels = args.wheels or Path(tmp)
        wheels.mkdir(parents=True, exist_ok=True)
        fetch_wheels(wheels)
        photos = {name: read_photo(src, wheels) for name, src in SOURCES.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (make, quality) in OUTPUTS.items():
        path = args.out / name
        make(photos).save(path, "JPEG", quality=quality, optimize=True)
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SystemExit(f"{path} is {size} bytes, over the {MAX_BYTES} byte budget for examples")
        print(f"{path.name}: {Image.open(path).size[0]}x{Image.open(path).size[1]}, {size / 1000:.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
