import sys

from kdakit.cli import main

sys.exit(main())
