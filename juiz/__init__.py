"""juiz: grade RAG answers with a local LLM judge served by vLLM."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("juiz")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
