from nm_scanguard.service import main

raise SystemExit(main())
