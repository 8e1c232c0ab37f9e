"""Process management and configuration: settings, the error tree, retries, child processes and reaping."""
