import sys

from tfcheck.cli import main

sys.exit(main())
