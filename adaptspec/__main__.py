from adaptspec.cli import main

raise SystemExit(main())
