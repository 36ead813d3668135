from specplay.cli import main

raise SystemExit(main())
