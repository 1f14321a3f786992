"""The site's publishing settings as the build reads them: docs/conf.py, loaded once.

``html_baseurl`` comes from ``$TORCH_EXPLAINERS_BASEURL`` or conf.py's default, so the
checks compare the built site with the same setting the build used.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from urllib.parse import urlparse

CONF = Path(__file__).resolve().parents[1] / "docs" / "conf.py"


@functools.cache
def conf():
    """docs/conf.py as a module (it only sets values, and puts docs/_ext on sys.path)."""
    spec = importlib.util.spec_from_file_location("_torch_explainers_conf", CONF)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def base_url() -> str:
    """Where the site is published, ending with "/"."""
    return conf().html_baseurl


def base_path() -> str:
    """The path part of :func:`base_url`, e.g. "/torch-explainers/": the 404 page's links start with it."""
    return urlparse(base_url()).path
