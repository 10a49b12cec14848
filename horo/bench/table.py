"""Results: the printed table (nccl-tests layout), JSON and CSV."""
import csv
import json

FIELDS = ("collective", "variant", "bytes", "count", "dtype", "op", "nranks", "time_us", "algbw_GBps",
          "busbw_GBps", "wrong", "ratio")


def record(collective, variant, nbytes, count, dtype, op, nranks, seconds, factor, wrong):
    algbw = nbytes / seconds / 1e9 if seconds > 0 else float("inf")
    return {"collective": collective, "variant": variant, "bytes": nbytes, "count": count, "dtype": dtype,
            "op": op, "nranks": nranks, "time_us": seconds * 1e6, "algbw_GBps": algbw,
            "busbw_GBps": algbw * factor, "wrong": int(wrong), "ratio": None}


def add_ratios(records, variant, baseline):
    """ratio = baseline time / variant time on the variant's rows (>1: horo is faster)."""
    base = {r["bytes"]: r for r in records if r["variant"] == baseline}
    for r in records:
        b = base.get(r["bytes"])
        if r["variant"] == variant and b is not None and r["time_us"] > 0:
            r["ratio"] = b["time_us"] / r["time_us"]


def header(variants, with_ratio):
    top = f"#{'':>11} {'':>12} {'':>8} {'':>7} "
    sub = f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>7} "
    for v in variants:
        top += f" | {v:^36}"
        sub += f" | {'time':>9} {'algbw':>8} {'busbw':>8} {'#wrong':>7}"
    units = f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>7} " + "".join(
        f" | {'(us)':>9} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}" for _ in variants)
    if with_ratio:
        top += f" | {'':>6}"
        sub += f" | {'ratio':>6}"
        units += f" | {'':>6}"
    return f"{top}\n{sub}\n{units}"


def row(records_for_size, variants, with_ratio):
    """One line for one size; records_for_size: variant -> record."""
    first = records_for_size[variants[0]]
    line = f" {first['bytes']:>11} {first['count']:>12} {first['dtype']:>8} {first['op']:>7} "
    for v in variants:
        r = records_for_size.get(v)
        if r is None:
            line += f" | {'n/a':>9} {'':>8} {'':>8} {'':>7}"
        else:
            line += (f" | {r['time_us']:>9.1f} {r['algbw_GBps']:>8.3f} {r['busbw_GBps']:>8.3f} "
                     f"{r['wrong']:>7d}")
    if with_ratio:
        ratio = first.get("ratio")
        line += f" | {ratio:>6.2f}" if ratio is not None else f" | {'n/a':>6}"
    return line


def write_json(path, meta, records):
    with open(path, "w") as f:
        json.dump(dict(meta, results=records), f, indent=2)
        f.write("\n")


def write_csv(path, records):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in records:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in FIELDS})
