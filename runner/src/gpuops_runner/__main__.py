import sys

from gpuops_runner.cli import main

sys.exit(main())
