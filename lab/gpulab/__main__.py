from __future__ import annotations

import sys

from gpulab.cli import main

sys.exit(main())
