from nm_scanguard.daemon.entry import main

raise SystemExit(main())
