"""A plug-in module that fails while importing (not with ImportError)."""

raise RuntimeError("plug-in could not find its kernel library")
