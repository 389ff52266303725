from ivm.cli.main import main

raise SystemExit(main())
