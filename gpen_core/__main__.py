from gpen_core.cli import main

raise SystemExit(main())
