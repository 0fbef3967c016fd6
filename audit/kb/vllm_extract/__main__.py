"""``python -m audit.kb.vllm_extract``: see :mod:`audit.kb.vllm_extract.cli`."""

import sys

from audit.kb.vllm_extract.cli import main

sys.exit(main())
