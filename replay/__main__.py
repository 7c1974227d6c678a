"""``python -m replay`` runs the command line."""

from replay.cli.entry import main

raise SystemExit(main())
