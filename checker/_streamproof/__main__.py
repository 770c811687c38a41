"""`python -m streamproof` is the `streamproof` command."""

import sys

from checker.cli import main

sys.exit(main())
