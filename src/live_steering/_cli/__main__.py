"""``python -m live_steering._cli``: the ``live-steering`` command without its script."""

from . import main

raise SystemExit(main())
