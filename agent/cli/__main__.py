"""``python -m agent.cli``: the ``voice-agent`` command, for a checkout without the script."""

import sys

from agent.cli.main import main

sys.exit(main())
