"""`python -m workers`: run one worker alone (the same as `spate worker`)."""

import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
