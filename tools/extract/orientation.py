"""Upright, level page images for OCR: the page's quarter turn (Tesseract's orientation and script detection), its
skew (a projection profile), and the map from the turned image's pixels back to the page image's.

- **Skew** (`skew_angle`): text lines are level when the rows of a page's dark pixels are most concentrated. The
  dark pixels of a copy at most `SKEW_SIDE_PX` on its longer side are projected onto the vertical axis at each
  angle from -`SKEW_MAX_DEG` to +`SKEW_MAX_DEG` (every `SKEW_STEP_DEG`, then refined), and the angle whose row
  histogram has the largest sum of squares wins (Postl's projection-profile method; Hull, "Document image skew
  detection: survey and annotated bibliography", 1998). A page is turned only when that beats level by
  `SKEW_MIN_GAIN` and by at least `SKEW_MIN_DEG`: below that Tesseract reads as well unturned.
- **Quarter turns** (`quarter_turn`): Tesseract's OSD (`--psm 0`, `osd.traineddata`, shipped with Debian's
  tesseract-ocr) says how far clockwise a page must be turned to be upright (0, 90, 180 or 270 degrees); a reading
  below `OSD_MIN_CONFIDENCE` is ignored. It costs a Tesseract run, so `tools.extract.ocr.read_page` asks it only when
  the first reading's mean word confidence is low.
- **Boxes back** (`boxes_back`): words read on the turned image get the axis-aligned bounds of their box's corners
  mapped back onto the page image, with the same affine map Pillow's `Image.rotate(expand=True)` samples with.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytesseract
from PIL import Image

SKEW_MAX_DEG = 15.0
"""The largest skew looked for, degrees either way (a page fed crooked into a scanner)."""
SKEW_STEP_DEG = 0.5
"""The coarse search's step, degrees; the best angle is then refined to a tenth of that."""
SKEW_MIN_DEG = 0.5
"""A smaller skew is left alone (Tesseract's own line finding copes), degrees."""
SKEW_MIN_GAIN = 1.1
"""The profile's sharpness at the skew angle must exceed the level one's by this factor (a photo or a blank page
has no clear best angle)."""
SKEW_SIDE_PX = 800
"""The longer side of the copy the skew is measured on, pixels."""
BLANK_DARK_PIXELS = 20
"""A page image with fewer dark pixels than this is blank: OCR is not run on it (a speck of dust is not text)."""
BODY_PITCH_PT = 13.2
"""The line pitch of body text, points (11 pt type at 1.2 leading), by which `estimate_dpi` reads a resolution off
the text's line pitch in pixels."""
OSD_MIN_CONFIDENCE = 1.5
"""Tesseract's orientation confidence below which its quarter turn is not trusted (its own scale; a clear page
gives 5-15)."""


def _sharpness(ys: npt.NDArray[np.float64], xs: npt.NDArray[np.float64], degrees: float) -> float:
    """Sum of squares of the one-pixel row histogram of dark pixels (y down) projected along lines tilted by
    `degrees` counter-clockwise (fixed-width rows, so that no angle is favoured by its range)."""
    t = math.radians(degrees)
    rows = np.rint(ys * math.cos(t) + xs * math.sin(t)).astype(np.int64)
    hist = np.bincount(rows - rows.min())
    return float(np.sum(hist.astype(np.float64) ** 2))


def _dark(image: Image.Image) -> tuple[npt.NDArray[np.bool_], float]:
    """The dark pixels (< 128) of a grey copy of `image` at most `SKEW_SIDE_PX` on its longer side, and the copy's
    pixels per pixel of `image`."""
    small = image.convert("L")
    small.thumbnail((SKEW_SIDE_PX, SKEW_SIDE_PX))
    return np.asarray(small) < 128, small.width / max(image.width, 1)


def is_blank(image: Image.Image) -> bool:
    """Whether `image` has fewer than `BLANK_DARK_PIXELS` dark pixels (< 128) at full resolution: nothing for OCR."""
    return int((np.asarray(image.convert("L")) < 128).sum()) < BLANK_DARK_PIXELS


def line_pitch_px(image: Image.Image) -> float | None:
    """The line pitch of a level `image`'s text, in its pixels: the first peak of the autocorrelation of its row
    profile of dark pixels (robust to lines broken into several runs); None without a clear one (fewer than three
    lines' worth of rows, or a peak under a quarter of the profile's energy)."""
    dark, ratio = _dark(image)
    rows = dark.sum(axis=1).astype(np.float64)
    rows -= rows.mean()
    energy = float(np.dot(rows, rows))
    if energy == 0 or rows.size < 8:
        return None
    corr = np.correlate(rows, rows, mode="full")[rows.size - 1 :] / energy
    below = np.flatnonzero(corr < 0)
    if below.size == 0:
        return None
    lag = int(below[0] + np.argmax(corr[below[0] :]))
    if corr[lag] < 0.25 or lag * 3 > rows.size:
        return None
    return lag / ratio


def estimate_dpi(image: Image.Image, low: float = 72.0, high: float = 600.0) -> float:
    """A plausible resolution of a document image that records none (or a nonsensical one), dots per inch: its
    line pitch read as body text's (`BODY_PITCH_PT`), else its longer side read as a Letter page's 11 inches;
    clamped to [`low`, `high`]."""
    pitch = line_pitch_px(image)
    dpi = pitch * 72 / BODY_PITCH_PT if pitch is not None else max(image.size) / 11
    return float(min(max(dpi, low), high))


def skew_angle(image: Image.Image) -> float:
    """Degrees to turn `image` counter-clockwise (Pillow's `rotate` sign) so that its text lines are level: the
    negative of the lines' tilt; 0.0 for a level page or one without a clear angle (module docstring)."""
    dark, _ = _dark(image)
    ys, xs = (a.astype(np.float64) for a in np.nonzero(dark))
    if ys.size < 200:
        return 0.0
    ys, xs = ys - ys.mean(), xs - xs.mean()

    def best(angles: npt.NDArray[np.floating[Any]]) -> float:
        return float(max(angles, key=lambda a: _sharpness(ys, xs, float(a))))

    coarse = best(np.arange(-SKEW_MAX_DEG, SKEW_MAX_DEG + 1e-9, SKEW_STEP_DEG))
    fine = best(np.arange(coarse - SKEW_STEP_DEG, coarse + SKEW_STEP_DEG + 1e-9, SKEW_STEP_DEG / 10))
    if abs(fine) < SKEW_MIN_DEG or _sharpness(ys, xs, fine) < SKEW_MIN_GAIN * _sharpness(ys, xs, 0.0):
        return 0.0
    return -fine


def quarter_turn(image: Image.Image, dpi: int, timeout_s: float = 0.0) -> int:
    """Degrees (0, 90, 180 or 270) Tesseract's OSD says `image` must be turned clockwise to be upright; 0 when it
    cannot tell (too little text) or is not confident (`OSD_MIN_CONFIDENCE`).

    Raises:
        pytesseract.TesseractNotFoundError: no tesseract command. RuntimeError: the run took longer than `timeout_s`
            seconds (0: no bound) and was killed (pytesseract's "Tesseract process timeout").
    """
    try:
        osd = pytesseract.image_to_osd(
            image, config=f"--psm 0 --dpi {dpi}", output_type=pytesseract.Output.DICT, timeout=timeout_s
        )
    except pytesseract.TesseractError:  # "Too few characters", no osd data: nothing to go by
        return 0
    turn = int(osd.get("rotate", 0)) % 360
    return turn if float(osd.get("orientation_conf", 0.0)) >= OSD_MIN_CONFIDENCE else 0


def turned(image: Image.Image, degrees: float) -> Image.Image:
    """`image` turned `degrees` counter-clockwise about its centre, expanded to hold all of it, new corners white."""
    return image.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255)


def _back_matrix(degrees: float, size: tuple[int, int]) -> tuple[float, float, float, float, float, float]:
    """The affine map (a, b, c, d, e, f) from a pixel of `turned(image, degrees)` to one of `image` of `size`:
    x = a X + b Y + c, y = d X + e Y + f (Pillow's `Image.rotate` with `expand=True`)."""
    w, h = size
    angle = -math.radians(degrees)
    a, b, d, e = math.cos(angle), math.sin(angle), -math.sin(angle), math.cos(angle)
    c = a * (-w / 2) + b * (-h / 2) + w / 2
    f = d * (-w / 2) + e * (-h / 2) + h / 2
    xs, ys = [], []
    for x, y in ((0, 0), (w, 0), (w, h), (0, h)):
        xs.append(a * x + b * y + c)
        ys.append(d * x + e * y + f)
    nw = math.ceil(max(xs)) - math.floor(min(xs))
    nh = math.ceil(max(ys)) - math.floor(min(ys))
    tx, ty = -(nw - w) / 2.0, -(nh - h) / 2.0
    return a, b, a * tx + b * ty + c, d, e, d * tx + e * ty + f


def boxes_back(boxes: npt.NDArray[np.float64], degrees: float, size: tuple[int, int]) -> npt.NDArray[np.float64]:
    """`(n, 4)` float64 pixel boxes `(left, top, right, bottom)` read on `turned(image, degrees)` as the axis-aligned
    bounds of their corners on `image` (of `size` pixels); unchanged for 0 degrees."""
    if degrees == 0 or boxes.size == 0:
        return boxes
    a, b, c, d, e, f = _back_matrix(degrees, size)
    corners_x = boxes[:, [0, 2, 2, 0]]
    corners_y = boxes[:, [1, 1, 3, 3]]
    x = a * corners_x + b * corners_y + c
    y = d * corners_x + e * corners_y + f
    return np.stack([x.min(axis=1), y.min(axis=1), x.max(axis=1), y.max(axis=1)], axis=1)
