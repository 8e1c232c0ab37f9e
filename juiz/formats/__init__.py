"""Input and output formats: readers, the seeds' markdown report, options as text."""
