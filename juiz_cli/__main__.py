"""`python -m juiz_cli …`: the `juiz` command without its console script (the demo and tests start children so)."""

from juiz_cli import main

raise SystemExit(main())
