import sys

try:
    from checker.cli import main
except KeyboardInterrupt:  # (interrupted while the modules load: no traceback)
    print("streamproof: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
