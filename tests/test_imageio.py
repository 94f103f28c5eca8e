"""Hardened decoding: every hostile file in tests/hostile.py, plus encode/shrink contracts."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image, ImageCms, ImageFile, ImageOps

from gpen_core.errors import GPENError, InputError
from gpen_core.modes import PILLOW_MAX_PIXELS
from gpen_core.images.decode import (
    DEFAULT_LIMITS,
    DecodedImage,
    InputLimits,
    decode_image,
    encode_image,
    shrink_to_max_side,
)
from tests.hostile import CASES, CASES_BY_NAME, Case, Expectation, make_all, png_bytes

ROOT = Path(__file__).resolve().parents[1]


def _anonymous_rss() -> int:
    """Resident anonymous memory (where decoded pixels live). Not the whole RSS: it also counts library pages the
    kernel may evict under other processes' pressure and fault back in later, which read as growth here."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return psutil.Process().memory_info().rss
    return int(re.search(r"RssAnon:\s+(\d+) kB", status).group(1)) * 1024


@pytest.fixture(scope="module")
def rss_before_table() -> int:
    """Resident memory before this module's first hostile file (other test files excluded)."""
    return _anonymous_rss()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, rss_before_table: int) -> dict[str, tuple[Path, Expectation]]:
    return make_all(tmp_path_factory.mktemp("hostile"))


def _assert_contract(d: DecodedImage) -> None:
    assert d.rgb.dtype == np.uint8 and d.rgb.ndim == 3 and d.rgb.shape[2] == 3
    assert d.rgb.flags.c_contiguous and d.rgb.flags.writeable
    if d.alpha is not None:
        assert d.alpha.dtype == np.uint8 and d.alpha.shape == d.rgb.shape[:2] and d.alpha.flags.c_contiguous


def _assert_outcome(source: bytes | Path, expect: Expectation) -> DecodedImage | None:
    if not expect.accepted:
        with pytest.raises(InputError) as info:
            decode_image(source)
        message = str(info.value)
        for s in expect.says:
            assert s.lower() in message.lower(), f"{s!r} not in refusal: {message}"
        return None
    d = decode_image(source)
    _assert_contract(d)
    assert d.size == expect.size
    assert (d.alpha is not None) == expect.alpha, d.notes
    notes = " | ".join(d.notes).lower()
    for s in expect.says:
        assert s.lower() in notes, f"{s!r} not in notes: {d.notes}"
    if expect.check is not None:
        expect.check(d.rgb, d.alpha)
    return d


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_file_from_path(case: Case, hostile: dict[str, tuple[Path, Expectation]]) -> None:
    path, expect = hostile[case.name]
    _assert_outcome(path, expect)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_file_from_bytes(case: Case, hostile: dict[str, tuple[Path, Expectation]]) -> None:
    path, expect = hostile[case.name]
    _assert_outcome(path.read_bytes(), expect)


def test_table_covers_the_brief() -> None:
    names = set(CASES_BY_NAME)
    for required in (
        "empty_file", "text_renamed_png", "truncated_jpeg", "png_bomb_50000x50000", "jpeg_8000x6000",
        "exif_orientation_6", "exif_orientation_8", "cmyk_jpeg", "gray16_png", "rgb16_png", "rgba_png",
        "la_png", "palette_transparent_png", "gray_png", "bilevel_png", "animated_gif", "animated_webp",
        "svg", "ico", "tiny_16x16", "strip_1x20000", "over_25mb", "gif_1M_frames", "tiff_20000_pages",
    ):  # fmt: skip
        assert required in names
    assert len(names) == len(CASES), "case names must be unique"
    assert len({c.filename for c in CASES}) == len(CASES), "file names must be unique (one folder)"


def test_bomb_is_refused_from_its_header_before_any_pixel_decoder(
    hostile: dict[str, tuple[Path, Expectation]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """How fast a refusal is: benchmarks/bench.py --refusals. Here: that it is decided on the header."""
    path, _ = hostile["png_bomb_50000x50000"]
    assert path.stat().st_size < 1000  # the file really is tiny: only the header declares 2.5 GP
    decoders: list[str] = []
    real = Image._getdecoder
    monkeypatch.setattr(Image, "_getdecoder", lambda mode, name, *a, **k: decoders.append(name) or real(mode, name, *a, **k))
    proc = psutil.Process()
    before = proc.memory_info().rss
    for _ in range(20):
        with pytest.raises(InputError):
            decode_image(path)
    assert decoders == [], f"Pillow started decoding pixels ({decoders}) before the size was refused"
    assert proc.memory_info().rss - before < 20e6  # 7.5 GB of RGB would be allocated if it decoded


@pytest.mark.parametrize("name", ["gif_1M_frames", "tiff_20000_pages"])
def test_frame_count_bombs_stop_counting_at_the_cap(
    name: str, hostile: dict[str, tuple[Path, Expectation]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pillow's n_frames walks every frame (~7 s for the GIF, minutes for the TIFF; timed in
    benchmarks/bench.py --refusals); the decoder counts at most 1000 and never seeks past them."""
    from PIL import GifImagePlugin, TiffImagePlugin

    seeks: list[int] = []
    for cls in (GifImagePlugin.GifImageFile, TiffImagePlugin.TiffImageFile):
        real = cls._seek

        def counted(self: Image.Image, frame: int, *a: object, _real=real, **k: object) -> object:
            seeks.append(frame)
            return _real(self, frame, *a, **k)

        monkeypatch.setattr(cls, "_seek", counted)
    path, _ = hostile[name]
    d = decode_image(path)
    assert any("1000 or more" in n for n in d.notes), d.notes
    assert len(seeks) <= 1002 and max(seeks, default=0) <= 1000, f"{len(seeks)} seeks, up to frame {max(seeks)}"


def test_pillow_globals_are_left_alone(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    max_pixels = Image.MAX_IMAGE_PIXELS
    with pytest.raises(InputError):
        decode_image(hostile["truncated_jpeg"][0])
    with pytest.raises(InputError):
        decode_image(hostile["png_bomb_50000x50000"][0])
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    assert Image.MAX_IMAGE_PIXELS == max_pixels
    # The default limit sits below Pillow's warning threshold, so Pillow never warns for what we accept.
    assert Image.MAX_IMAGE_PIXELS is None or DEFAULT_LIMITS.max_pixels < Image.MAX_IMAGE_PIXELS
    assert Image.MAX_IMAGE_PIXELS is None or PILLOW_MAX_PIXELS == 2 * Image.MAX_IMAGE_PIXELS  # where a raised limit stops


def test_refuses_to_run_with_truncated_loading_switched_on(
    hostile: dict[str, tuple[Path, Expectation]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(RuntimeError, match="LOAD_TRUNCATED_IMAGES"):
        decode_image(hostile["truncated_jpeg"][0])


def test_cmyk_case_is_adobe_inverted(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    with Image.open(hostile["cmyk_jpeg"][0]) as im:
        assert im.mode == "CMYK" and "adobe" in im.info  # so the case exercises Adobe's inverted CMYK


def test_original_size_is_as_stored(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    d = decode_image(hostile["exif_orientation_6"][0])
    assert d.original_size == (64, 48) and d.size == (48, 64)
    assert d.format == "JPEG"


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_matches_pillow(orientation: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(orientation)
    stored = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "o.png"  # lossless, so the comparison is exact
    Image.fromarray(stored).save(path, "PNG", exif=exif.tobytes())
    with Image.open(path) as im:
        expected = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    d = decode_image(path)
    np.testing.assert_array_equal(d.rgb, expected)
    assert any(f"EXIF orientation {orientation}" in n for n in d.notes) == (orientation != 1)


def test_exif_orientation_rotates_alpha_too(tmp_path: Path) -> None:
    a = np.zeros((20, 40, 4), np.uint8)
    a[..., 3] = 255
    a[:5, :5, 3] = 0  # transparent stored top-left
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(a, "RGBA").save(tmp_path / "a.png", exif=exif.tobytes())
    d = decode_image(tmp_path / "a.png")
    assert d.alpha is not None and d.alpha.shape == (40, 20)
    assert (d.alpha[:5, -5:] == 0).all() and d.alpha[-1, 0] == 255  # now top-right


def test_reduce_to_shrinks_big_jpeg_at_decode(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    path, _ = hostile["jpeg_8000x6000"]
    # Scaled while the result keeps ≥ 90% of the target's longest side (imageio._DRAFT_KEEP):
    # 4000 px for a 2048 px target decodes at 2000 px.
    cases = ((1024, (1000, 750)), (1200, (2000, 1500)), (2048, (2000, 1500)), (2300, (4000, 3000)), (1000, (1000, 750)), (5000, (8000, 6000)))
    for reduce_to, size in cases:
        d = decode_image(path, reduce_to=reduce_to)
        assert d.size == size and max(d.size) >= 0.9 * reduce_to
        assert d.original_size == (8000, 6000)
        assert any("shrunk at decode from 8000×6000" in n for n in d.notes) == (size != (8000, 6000))
        # The shrink is said among the notes and handed over as data, so no reader matches its wording.
        said = (f"shrunk at decode from 8000×6000 to {size[0]}×{size[1]} (JPEG 1/{8000 // size[0]} scale)",)
        assert d.shrinks == (said if size != (8000, 6000) else ()) and set(d.shrinks) <= set(d.notes)
    # The DCT-scaled decode is the same picture as a full decode shrunk afterwards.
    reduced = decode_image(path, reduce_to=1200).rgb
    full, _ = shrink_to_max_side(decode_image(path).rgb, 2000)
    assert np.abs(reduced.astype(int) - full.astype(int)).mean() < 3


def test_reduce_to_leaves_other_formats_alone(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    d = decode_image(hostile["rgba_png"][0], reduce_to=16)
    assert d.size == (64, 32) and not any("shrunk" in n for n in d.notes)
    with pytest.raises(ValueError):
        decode_image(hostile["rgba_png"][0], reduce_to=0)


_MEASURE = """
import json, sys, time
from gpen_core.images.decode import decode_image
def peak():  # VmHWM: this process's peak RSS (ru_maxrss would include the parent's, kept across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
out = {"base": peak()}
# CPU seconds, not wall: the two decodes are compared with each other, on a machine others share
t = time.process_time(); d = decode_image(sys.argv[1], reduce_to=1024); out["reduced_s"] = time.process_time() - t
out["reduced_peak"] = peak(); out["reduced_size"] = d.size; del d
t = time.process_time(); d = decode_image(sys.argv[1]); out["full_s"] = time.process_time() - t
out["full_peak"] = peak(); out["full_size"] = d.size
print(json.dumps(out))
"""


def test_big_jpeg_decode_peak_memory(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    """A fresh process, so the kernel's peak-RSS mark (VmHWM) is this decode's peak alone."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc/self/status (VmHWM) to measure peak memory")
    path, _ = hostile["jpeg_8000x6000"]
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)
    rgb_bytes = 8000 * 6000 * 3
    # Pillow's buffer (4 B/px) + our RGB (3 B/px) is 2.33× the RGB size; allow 3×.
    assert m["full_peak"] - m["base"] < 3 * rgb_bytes, m
    # 1/4-scale decode: 2000×1500 RGB is 9 MB; libjpeg's working set is small too.
    assert m["reduced_peak"] - m["base"] < 60e6, m
    # A ratio against the full decode in the same process, in CPU seconds: the 1/4-scale DCT decode
    # skips most of the work (measured 0.08 of the full decode's CPU time; allow 0.5).
    assert m["reduced_s"] < 0.5 * m["full_s"], m
    print(
        f"\n8000×6000 JPEG: full {m['full_s']:.2f} CPU s, peak +{(m['full_peak'] - m['base']) / 1e6:.0f} MB; "
        f"reduce_to=1024 {m['reduced_s']:.2f} CPU s, peak +{(m['reduced_peak'] - m['base']) / 1e6:.0f} MB"
    )


def _mutants(data: bytes, seed: int, n: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        b = bytearray(data)
        if i % 3 == 0:
            b = b[: int(rng.integers(1, len(b)))]  # truncate anywhere, header included
        else:
            for pos in rng.integers(0, len(b), int(rng.integers(1, 8))):
                b[pos] = int(rng.integers(0, 256))  # flip bytes, headers included
        out.append(bytes(b))
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow warns about the corrupt EXIF/TIFF tags it skips
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "WEBP", "TIFF", "BMP"])
def test_damaged_files_only_ever_raise_our_errors(fmt: str) -> None:
    rng = np.random.default_rng(1)
    img = Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, fmt)
    accepted = refused = 0
    for data in _mutants(buf.getvalue(), seed=len(fmt), n=60):
        try:
            d = decode_image(data)
        except GPENError as e:
            assert str(e) and "try again" in str(e).lower(), str(e)
            refused += 1
        else:
            _assert_contract(d)
            accepted += 1
    assert refused > 0  # truncations at least must be caught


def test_tiff_integer_modes(tmp_path: Path) -> None:
    Image.fromarray(np.full((16, 16), 32768, np.uint16)).save(tmp_path / "i16.tif")
    d = decode_image(tmp_path / "i16.tif")
    assert (d.rgb == 128).all() and any("16-bit" in n for n in d.notes)
    a = np.zeros((16, 16), np.int32)
    a[:, 8:] = 1_000_000
    Image.fromarray(a, "I").save(tmp_path / "i32.tif")
    d = decode_image(tmp_path / "i32.tif")
    assert (d.rgb[:, :8] == 0).all() and (d.rgb[:, 8:] == 255).all() and any("rescaled" in n for n in d.notes)


def test_opaque_alpha_is_dropped_and_said(tmp_path: Path) -> None:
    Image.new("RGBA", (20, 20), (10, 20, 30, 255)).save(tmp_path / "o.png")
    d = decode_image(tmp_path / "o.png")
    assert d.alpha is None and (d.rgb == (10, 20, 30)).all()
    assert any("opaque alpha" in n for n in d.notes)


def test_custom_limits(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    png = hostile["tiny_16x16"][0]
    with pytest.raises(InputError, match="PNG files are not accepted here"):
        decode_image(png, InputLimits(formats=("JPEG",)))
    with pytest.raises(InputError, match="limit is 100 bytes"):
        decode_image(hostile["bmp"][0], InputLimits(max_file_bytes=100))
    with pytest.raises(InputError, match=r"aspect ratio 2:1\); the limit is 1.5:1"):
        decode_image(hostile["rgba_png"][0], InputLimits(max_aspect=1.5))
    with pytest.raises(ValueError):
        InputLimits(formats=("SVG",))
    with pytest.raises(ValueError):
        InputLimits(max_pixels=0)


def test_bad_paths_and_arguments(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        decode_image(tmp_path / "missing.png")
    with pytest.raises(InputError, match="not a regular file"):
        decode_image(tmp_path)
    with pytest.raises(InputError, match="limit is 25 MB"):
        decode_image(b"\x89PNG\r\n\x1a\n" + bytes(26_000_000))
    with pytest.raises(TypeError):
        decode_image(12345)  # type: ignore[arg-type]


def test_header_looks_right_but_is_broken() -> None:
    with pytest.raises(InputError, match="starts like a PNG"):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    # A bomb header under Pillow's own guard: our limit is what refuses it, with our numbers.
    with pytest.raises(InputError, match=r"8000×7000 \(56 megapixels\).*at most 7559×6614"):
        decode_image(png_bytes(8000, 7000, 8, 2))


def test_a_photo_between_pillows_two_bomb_guards_is_refused_in_our_words_only() -> None:
    # 108 MP: over Pillow's warning (~89 MP), under its error (~179 MP). Its warning, with a site-packages
    # path, must not reach a CLI user's terminal ahead of our sentence.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InputError, match=r"12000×9000 \(108 megapixels\)"):
            decode_image(png_bytes(12000, 9000, 8, 2))
    assert [str(w.message) for w in caught] == []


def test_a_raised_pixel_limit_reads_a_scan_whole_quietly_and_only_a_local_run_is_told_of_it(tmp_path: Path) -> None:
    """--max-megapixels (RestoreOptions.max_pixels): a 90 MP TIFF, past Pillow's warning, which its load repeats; a
    27 MB file a raised limit admits; the server's refusal (its visitor cannot pass a flag) names none, a local run's
    names the value that admits the photo, and none past Pillow's own refusal."""
    from gpen_core.images.limits import input_limits

    scan = tmp_path / "scan.tif"
    Image.new("L", (10_000, 9_000), 90).save(scan, compression="tiff_deflate")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert decode_image(scan, input_limits(90_000_000), reduce_to=1000).size == (1000, 900)
    assert [str(w.message) for w in caught] == []
    with pytest.raises(InputError) as server:
        decode_image(scan)
    assert "limit is 50 megapixels" in str(server.value) and "--max-megapixels" not in str(server.value)
    with pytest.raises(InputError, match=r"\(or raise the limit for this run: --max-megapixels 90\)"):
        decode_image(scan, input_limits(50_000_000))
    with pytest.raises(InputError) as bomb:  # 200 MP: no flag value admits it
        decode_image(png_bytes(20_000, 10_000, 8, 2), input_limits(178_000_000))
    assert "limit is 178 megapixels" in str(bomb.value) and "--max-megapixels" not in str(bomb.value), bomb.value
    raw = tmp_path / "raw.png"  # 3000×3000 stored uncompressed: 27 MB
    Image.new("RGB", (3000, 3000), (120, 90, 80)).save(raw, compress_level=0)
    with pytest.raises(InputError, match="limit is 25 MB"):
        decode_image(raw, input_limits(50_000_000))
    assert decode_image(raw, input_limits(60_000_000)).size == (3000, 3000)


def test_encode_png_round_trip_with_alpha() -> None:
    rng = np.random.default_rng(3)
    rgb = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (30, 40), dtype=np.uint8)
    with Image.open(io.BytesIO(encode_image(rgb, "png", alpha=alpha))) as im:
        assert im.format == "PNG" and im.mode == "RGBA"
        back = np.asarray(im)
    np.testing.assert_array_equal(back[..., :3], rgb)
    np.testing.assert_array_equal(back[..., 3], alpha)
    with Image.open(io.BytesIO(encode_image(rgb, "png"))) as im:
        assert im.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(im), rgb)


def test_decode_encode_decode_keeps_transparency(hostile: dict[str, tuple[Path, Expectation]]) -> None:
    d = decode_image(hostile["rgba_png"][0])
    again = decode_image(encode_image(d.rgb, "png", alpha=d.alpha))
    assert again.alpha is not None
    np.testing.assert_array_equal(again.alpha, d.alpha)


def test_encode_jpeg_drops_alpha_and_keeps_colour() -> None:
    rgb = np.zeros((32, 32, 3), np.uint8)
    rgb[:, :16] = (220, 30, 30)
    rgb[:, 16:] = (30, 30, 220)
    data = encode_image(rgb, "jpeg", alpha=np.zeros((32, 32), np.uint8), quality=90)
    with Image.open(io.BytesIO(data)) as im:
        assert im.format == "JPEG" and im.mode == "RGB"
        back = np.asarray(im).astype(int)
    # 4:4:4 chroma: the colour edge stays sharp, one column from the boundary.
    assert np.abs(back[:, :14] - (220, 30, 30)).max() < 12 and np.abs(back[:, 18:] - (30, 30, 220)).max() < 12
    assert len(encode_image(rgb, "jpeg", quality=30)) < len(encode_image(rgb, "jpeg", quality=95))


def test_icc_profile_is_kept_and_written_back(tmp_path: Path) -> None:
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    Image.new("RGB", (20, 20), (1, 2, 3)).save(tmp_path / "p.jpg", icc_profile=srgb)
    d = decode_image(tmp_path / "p.jpg")
    assert d.icc_profile == srgb
    for fmt in ("png", "jpeg"):
        with Image.open(io.BytesIO(encode_image(d.rgb, fmt, icc_profile=d.icc_profile))) as im:
            assert im.info.get("icc_profile") == srgb
    # A non-RGB profile cannot describe our RGB output: not carried.
    lab = ImageCms.ImageCmsProfile(ImageCms.createProfile("LAB")).tobytes()
    Image.new("RGB", (20, 20)).save(tmp_path / "lab.png", icc_profile=lab)
    assert decode_image(tmp_path / "lab.png").icc_profile is None


@pytest.mark.parametrize("name", ["jpeg_icc_10mb", "jpeg_icc_invalid"])
def test_every_result_opens_in_pillow_and_opencv_whatever_profile_came_in(
    name: str, hostile: dict[str, tuple[Path, Expectation]]
) -> None:
    """A 10 MB (or broken) ICC profile is converted or dropped, never copied into the result."""
    import cv2

    d = decode_image(hostile[name][0])
    assert d.icc_profile is None
    for fmt in ("png", "jpeg"):
        data = encode_image(d.rgb, fmt, icc_profile=d.icc_profile)
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            assert im.size == (64, 48) and "icc_profile" not in im.info
        back = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert back is not None and back.shape == (48, 64, 3)


def test_a_big_profile_is_converted_not_just_dropped(tmp_path: Path) -> None:
    """The pixels follow the profile: a padded LAB-to-RGB swap would show; here an identity-like
    sRGB conversion keeps the colour, and LittleCMS really ran (the note names the profile)."""
    from tests.hostile import big_icc

    Image.new("RGB", (40, 30), (10, 200, 120)).save(tmp_path / "p.jpg", quality=95, icc_profile=big_icc(400_000))
    d = decode_image(tmp_path / "p.jpg")
    assert d.icc_profile is None and any("'sRGB built-in'" in n and "converted to sRGB" in n for n in d.notes)
    assert np.abs(d.rgb.reshape(-1, 3).mean(axis=0) - (10, 200, 120)).max() < 4


def test_out_of_memory_while_shrinking_or_encoding_is_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenCV's and Pillow's allocation failures become OutOfMemory (the ladder's signal)."""
    import cv2

    from gpen_core.errors import OutOfMemory

    def cv2_oom(*a: object, **k: object) -> None:
        raise cv2.error(
            "OpenCV(5.1.0) /io/opencv/modules/core/src/alloc.cpp:73: error: (-4:Insufficient memory) "
            "Failed to allocate 576000000 bytes in function 'OutOfMemoryError'"
        )

    monkeypatch.setattr(cv2, "resize", cv2_oom)
    with pytest.raises(OutOfMemory, match="shrink the 64×32 photo"):
        shrink_to_max_side(np.zeros((32, 64, 3), np.uint8), 16)

    def pil_oom(*a: object, **k: object) -> None:
        raise MemoryError()

    from gpen_core.images import encode as png_fast

    monkeypatch.setattr(png_fast, "encode_png", pil_oom)
    with pytest.raises(OutOfMemory, match="encode the 64×32 result as PNG"):
        encode_image(np.zeros((32, 64, 3), np.uint8), "png")


def test_encode_rejects_wrong_arrays() -> None:
    rgb = np.zeros((4, 4, 3), np.uint8)
    for bad in (np.zeros((4, 4), np.uint8), np.zeros((4, 4, 4), np.uint8), np.zeros((4, 4, 3), np.float32)):
        with pytest.raises(ValueError, match="RGB uint8"):
            encode_image(bad, "png")
    with pytest.raises(ValueError, match="alpha"):
        encode_image(rgb, "png", alpha=np.zeros((4, 5), np.uint8))
    with pytest.raises(ValueError):
        encode_image(rgb, "gif")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_image(rgb, "jpeg", quality=0)


def test_shrink_to_max_side() -> None:
    rgb = np.zeros((300, 400, 3), np.uint8)
    same, shrunk = shrink_to_max_side(rgb, 400)
    assert same is rgb and not shrunk
    small, shrunk = shrink_to_max_side(rgb, 100)
    assert shrunk and small.shape == (75, 100, 3) and small.dtype == np.uint8 and small.flags.c_contiguous
    alpha, _ = shrink_to_max_side(np.zeros((300, 400), np.uint8), 100)
    assert alpha.shape == (75, 100)
    # Area averaging: a fine checkerboard becomes its mean, not an aliased pattern.
    board = (np.indices((200, 200)).sum(0) % 2 * 255).astype(np.uint8)
    out, _ = shrink_to_max_side(np.dstack([board] * 3), 50)
    assert np.abs(out.astype(int) - 128).max() <= 1
    with pytest.raises(ValueError):
        shrink_to_max_side(rgb, 0)


@pytest.mark.parametrize("ext", ["png", "tif"])
def test_16bit_rgb_from_an_independent_writer(ext: str, tmp_path: Path) -> None:
    """OpenCV writes 16-bit RGB PNG and TIFF itself: a cross-check of the hand-made PNG case."""
    cv2 = pytest.importorskip("cv2")
    bgr = np.full((20, 30, 3), 32768, np.uint16)
    bgr[:, :5] = (0, 0, 65535)  # red, in OpenCV's BGR order
    cv2.imwrite(str(tmp_path / f"c.{ext}"), bgr)
    d = decode_image(tmp_path / f"c.{ext}")
    assert tuple(d.rgb[0, 0]) == (255, 0, 0) and tuple(d.rgb[0, 10]) == (128, 128, 128)
    assert any("16-bit" in n for n in d.notes)


def test_process_is_healthy_after_the_table(
    hostile: dict[str, tuple[Path, Expectation]], rss_before_table: int
) -> None:
    """Runs last: after every hostile file, a normal image still decodes and memory came back."""
    for path, _ in hostile.values():
        try:
            decode_image(path)
        except InputError:
            pass
    d = decode_image(hostile["bmp"][0])
    assert d.size == (64, 48)
    # The 8000×6000 decodes above are 144 MB each; none of them may stay resident.
    grown = _anonymous_rss() - rss_before_table
    assert grown < 400e6, f"RSS grew by {grown / 1e6:.0f} MB"



def test_a_file_over_the_size_limit_names_the_flag_that_raises_it_on_the_command_line_only(tmp_path: Path) -> None:
    """A 26 MB file: the command line's limits name --max-megapixels (above 50 MP it admits 8 bytes a pixel), the
    app's do not (a visitor passes no flags)."""
    from gpen_core.images.limits import input_limits

    big = tmp_path / "scan.png"
    big.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(26_000_000))
    with pytest.raises(InputError) as local:
        decode_image(big, input_limits(50_000_000))
    assert "The file is 26.0 MB" in str(local.value) and "--max-megapixels 51" in str(local.value), local.value
    with pytest.raises(InputError) as served:
        decode_image(big)
    assert "The file is 26.0 MB" in str(served.value) and "--max-megapixels" not in str(served.value)
