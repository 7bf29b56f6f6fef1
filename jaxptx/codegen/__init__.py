"""PTX → Python: write a jaxptx ``@kernel`` that traces back to given PTX.

``python -m jaxptx.codegen FILE.ptx [--name NAME] [--sugar] [-o OUT.py]``
"""

from ._writer import to_python as to_python
