"""``python -m harness.cli``: the ``aliasfuzz`` command."""

import sys

from . import main

sys.exit(main())
