"""The exit statuses of every ``aliasfuzz`` command: 0 done, 1 new findings (what a fuzz run is
for), 2 a set-up or usage error (bad input: a one-line message names the file and the field),
3 a bug of aliasfuzz itself (a bug report is written)."""

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_HARNESS = 0, 1, 2, 3
