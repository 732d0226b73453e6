import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from openai_server import FakeOpenAI  # noqa: E402


@pytest.fixture
def server():
    with FakeOpenAI() as s:
        yield s
