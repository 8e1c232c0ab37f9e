"""Judge engines: the JudgeEngine protocol and one adapter per back end, and the development models."""
