"""Makes the s3gds package importable when the tests run from any directory."""

import os
import sys

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(PYTHON_DIR, "..", "c", "s3gds.h")

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
