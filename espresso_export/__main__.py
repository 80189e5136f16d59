from espresso_export.cli.app import main

main()
