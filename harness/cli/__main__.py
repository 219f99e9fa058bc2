"""``python -m harness.cli``: the ``aliasfuzz`` command."""

import sys

from harness.cli import main

sys.exit(main())
