"""``python -m harness.targets.torch``: the PyTorch target process, the Python driver serving
the torch session (``harness.targets.driver``, ``harness.targets.torch.session``).

``ALIASFUZZ_TORCH_FAULT`` (``segfault`` or ``hang``) arms the driver's fault hook, a TEST DOUBLE
for the harness's reliability tests (``tests/e2e/test_reliability.py``): see ``driver``.
"""

from __future__ import annotations

import sys

from harness.collector import set_for_long_lived_heap
from harness.targets import driver
from harness.targets.torch.session import TorchProbe

if __name__ == "__main__":
    set_for_long_lived_heap()  # torch is imported: what it made lives as long as the process
    sys.exit(driver.serve(TorchProbe(), fault=driver.fault_from_env("ALIASFUZZ_TORCH_FAULT")))
