import sys

from bench.cli import main
from bench.procs import exit_without_teardown
from bench.store import close_all

code = main()
close_all()  # stores whole in their one file, then no module teardown (~1.5 s with torch and scipy loaded)
exit_without_teardown(code if isinstance(code, int) else 1 if code else 0)
