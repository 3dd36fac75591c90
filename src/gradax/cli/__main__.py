"""``python -m gradax.cli``."""

import sys

from ._main import main

sys.exit(main())
