from ivm.bench.engine import main

main()
