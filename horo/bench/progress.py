"""Progress on stderr, rank 0 only: tqdm when installed, else one plain line per step."""
import sys


class Progress:
    def __init__(self, total, enabled, desc="horo-bench"):
        self.enabled, self.total, self.done, self.desc = enabled, total, 0, desc
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, file=sys.stderr, unit="size", leave=False)
            except ImportError:
                self.bar = None

    def step(self, label):
        if not self.enabled:
            return
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.desc}] {self.done}/{self.total} {label}", file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
