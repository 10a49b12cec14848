"""The control-message decoders survive fuzzing (issue #14, item 3): a short run of the
mutation fuzzer under AddressSanitizer + UBSan (a read out of bounds, undefined behaviour,
an allocation past 64 MiB or a decode that does not re-encode to the same bytes ends it
non-zero). The full run (1,000,000 inputs, coverage) is scripts/fuzz_wire.sh."""
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_wire_decoders_survive_fuzzing_under_asan_and_ubsan():
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    done = subprocess.run(["bash", "scripts/fuzz_wire.sh", "50000", "7"], cwd=REPO, capture_output=True, text=True,
                          timeout=580)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "50005 inputs run" in out and "no crash" in out, out[-3000:]
