from autoscaler.commands.cli import main

main()
