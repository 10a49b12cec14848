"""Message sizes: '8', '1K', '256M', '1G' -> bytes; -b/-e/-f sweeps; rounding to whole elements."""
import re

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text):
    """'8' -> 8, '1K' -> 1024, '256M' -> 268435456 (binary units, like nccl-tests; 'KiB'/'KB' also work)."""
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"bad size {text!r} (examples: 8, 1K, 256M, 1G)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def size_sequence(begin, end, factor=2, step=None):
    """Byte sizes from begin to end inclusive: multiplied by `factor`, or plus `step` when given."""
    begin, end = parse_size(begin), parse_size(end)
    if begin <= 0 or end < begin:
        raise ValueError(f"need 0 < begin <= end (got {begin}, {end})")
    if step is not None:
        step = parse_size(step)
        if step <= 0:
            raise ValueError("step must be positive")
    elif factor < 2:
        raise ValueError("factor must be >= 2")
    out, n = [], begin
    while n <= end:
        out.append(n)
        n = n + step if step is not None else n * factor
    return out


def element_count(nbytes, itemsize, multiple=1):
    """Whole elements in nbytes, rounded down to a multiple of `multiple` (at least `multiple`)."""
    count = nbytes // itemsize
    count -= count % multiple
    return max(count, multiple)


def element_counts(sizes, itemsize, multiple=1):
    """Rounded element counts for a list of byte sizes, duplicates (after rounding) dropped."""
    out = []
    for s in sizes:
        c = element_count(s, itemsize, multiple)
        if c not in out:
            out.append(c)
    return out


def fmt_bytes(n):
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)
