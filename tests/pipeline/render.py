"""Rendering a picture mpcc drew the way a person sees it: Debian's headless
Chromium takes a screenshot of the SVG, and the checks count pixels by colour.
Shared by gantt.py and gantt_measured.py.
"""
import os
import shutil
import subprocess
import sys

SVG = "{http://www.w3.org/2000/svg}"
LEFT, PLOT, ROW = 130, 960, 24          # emit/gantt.c's layout
PALETTE = ["#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69",
           "#fccde5", "#ffffb3", "#bc80bd", "#ccebc5", "#ffed6f", "#d9d9d9"]


def browser():
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("render: FAIL: no headless Chromium (apt-get install chromium-headless-shell)")


def screenshot(svg, png, root):
    """The SVG as Chromium draws it at its own size, into png; an Image."""
    from PIL import Image
    w, h = int(float(root.get("width"))), int(float(root.get("height")))
    if os.path.exists(png):
        os.remove(png)
    r = subprocess.run([browser(), "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--force-device-scale-factor=1", "--window-size=%d,%d" % (w, h),
                        "--screenshot=" + png, "file://" + os.path.abspath(svg)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not os.path.exists(png):
        sys.exit("render: FAIL: chromium could not draw %s: %s" % (svg, r.stderr[-500:]))
    img = Image.open(png).convert("RGB")
    if img.size != (w, h):
        sys.exit("render: FAIL: screenshot %s is %dx%d, the SVG %dx%d" % (png, *img.size, w, h))
    colours = img.getcolors(maxcolors=1 << 20)
    if len(colours) < 3:
        sys.exit("render: FAIL: %s renders blank" % svg)
    return img


def rgb(hexcolour):
    return tuple(int(hexcolour[i:i + 2], 16) for i in (1, 3, 5))


def stage_pixels(img, row_top, stage):
    """Pixels of one row (3 px below its top, clear of labels) in a stage's
    colour, within the plot."""
    want = rgb(PALETTE[stage % len(PALETTE)])
    y = int(row_top) + 3
    return sum(1 for x in range(LEFT, LEFT + PLOT)
               if all(abs(c - w) <= 6 for c, w in zip(img.getpixel((x, y)), want)))


def check_stages(fail, case, img, boxes_by_row, step_scale):
    """Each compute row's pixels of each stage's colour against the run
    boxes' busy time (sum of durations * pixels per second) within 5%.
    Each box's two edges carry its outline, half a pixel wide and blended
    into up to two columns each at a fractional x: up to 3 px a box are
    not its colour (and an arrow may cross it). boxes_by_row: row_top ->
    [(stage, seconds)]."""
    checked = 0
    for top, boxes in boxes_by_row.items():
        for stage in sorted({s for s, _ in boxes}):
            mine = [d for s, d in boxes if s == stage]
            want = sum(mine) * step_scale
            got = stage_pixels(img, top, stage)
            if abs(got - want) > 0.05 * want + 3 * len(mine):
                fail("%s: row at y %.0f: stage %d has %d px of its colour in %d boxes, busy "
                     "%.1f px predicted" % (case, top, stage, got, len(mine), want))
            checked += 1
    return checked
