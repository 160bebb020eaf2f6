"""`python -m api`: run the API alone (the same as `spate api`)."""

import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main(["api", *sys.argv[1:]]))
