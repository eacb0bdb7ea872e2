#!/usr/bin/env python3
"""Whether an xwd dump of xep's 200x200 canvas shows the computed
Mandelbrot set: exit 0 when it does, 1 while it does not.

xep paints its canvas with a pattern of diagonal stripes, then each tile
that comes back from an mtile worker replaces its part. The set is
symmetric about the real axis (canvas row y mirrors row H - y), the
stripes are not (about 78% of mirrored pixels agree), so the canvas is
taken as collected when at least 97% of mirrored pixel pairs are equal.
Compares raw pixel values; needs a ZPixmap dump of 8 to 32 bits per pixel.
Usage: xep_tiles.py DUMP.xwd"""
import struct
import sys


def main(path):
    d = open(path, "rb").read()
    if len(d) < 100:
        print("xep_tiles: short dump")
        return 1
    h = struct.unpack(">25I", d[:100])
    header, width, height, bpp, bpl, ncolors = h[0], h[4], h[5], h[11], h[12], h[19]
    step = bpp // 8
    if width < 2 or height < 2 or step not in (1, 2, 3, 4):
        print(f"xep_tiles: cannot read a {width}x{height} dump of {bpp} bits per pixel")
        return 1
    base = header + ncolors * 12
    if len(d) < base + bpl * height:
        print("xep_tiles: truncated dump")
        return 1

    def pixel(x, y):
        o = base + y * bpl + x * step
        return d[o : o + step]

    same = total = 0
    for y in range(1, height // 2):
        for x in range(width):
            total += 1
            same += pixel(x, y) == pixel(x, height - y)
    ratio = same / total
    print(f"xep_tiles: {ratio:.3f} of mirrored pixels equal")
    return 0 if ratio >= 0.97 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
