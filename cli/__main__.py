from workbench_cli import main

main()
