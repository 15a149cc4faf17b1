import sys

from gpu_check.driver import main

sys.exit(main())
