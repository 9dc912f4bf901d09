from nm_scanguard.daemon import main

raise SystemExit(main())
