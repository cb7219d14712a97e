"""The `aotc` console command: runs the compiler binary shipped in the wheel."""
import os
import sys

from ._paths import cli_binary


def main():
    binary = cli_binary()
    # Replaces this process: exit codes, signals and output pass straight through.
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
