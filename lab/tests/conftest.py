"""The lab's tests reuse the product's test helpers and fixtures (tests/helpers.py, tests/conftest.py)."""
import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests"
sys.path.insert(0, str(TESTS))                       # `from helpers import ...`

_spec = importlib.util.spec_from_file_location("product_conftest", TESTS / "conftest.py")
_product = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_product)
globals().update({k: v for k, v in vars(_product).items() if not k.startswith("_")})
