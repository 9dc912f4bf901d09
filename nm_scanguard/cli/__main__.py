from nm_scanguard.cli.scanguardctl import main

raise SystemExit(main())
