"""``python -m live_steering``: the ``live-steering`` command, for an environment whose scripts
folder is not on ``PATH`` (``python -m live_steering demo``, ``... hook claude-code``)."""

from ._cli import main

raise SystemExit(main())
