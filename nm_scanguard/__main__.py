from nm_scanguard.entry import main

raise SystemExit(main())
