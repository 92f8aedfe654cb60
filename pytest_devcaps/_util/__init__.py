"""Private helpers at the bottom of the package (standard library and ``errors`` only): bounded file
reads and atomic writes, durations, importable names, the test pytest is running now."""
