"""``python -m replay`` runs the command line."""

from replay.cli.main import main

raise SystemExit(main())
