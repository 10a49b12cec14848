"""--plot: bus bandwidth against message size, one line per variant (matplotlib, Agg)."""


def plot(path, records, title):
    """Writes the PNG; returns None, or a message saying why nothing was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"--plot {path}: matplotlib is not installed (pip install matplotlib); no plot written"
    fig, ax = plt.subplots(figsize=(8, 5))
    variants = []
    for r in records:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    for v in variants:
        pts = sorted((r["bytes"], r["busbw_GBps"]) for r in records if r["variant"] == v)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=v)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
