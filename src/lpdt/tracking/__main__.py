"""``python -m lpdt.tracking init|log|sync|report ...`` (``lpdt.tracking.cli.main``)."""

import sys

from lpdt.tracking.cli import main

sys.exit(main())
