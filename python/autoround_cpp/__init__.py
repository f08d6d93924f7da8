"""autoround.cpp from Python: AutoRound's API on the native engine, in-process, without torch.

    from autoround_cpp import AutoRound
    ar = AutoRound("Qwen/Qwen3-0.6B", scheme="W4A16")
    ar.quantize_and_save(output_dir="./qmodel", format="auto_round")

    import autoround_cpp
    autoround_cpp.evaluate("./qmodel", ref_model="Qwen/Qwen3-0.6B", text="eval.txt")  # {'ppl': ..., 'kl_mean': ...}
"""

import os as _os
import subprocess as _subprocess
import sys as _sys


def _set_openblas_core() -> None:
    """OpenBLAS picks its kernels once, when ``_core`` loads it, and takes a CPU it does not know (an Emerald
    Rapids Xeon for Debian 12's 0.3.21) for one without AVX2. The CLI restarts itself with OPENBLAS_CORETYPE
    set (kernels/cpu/isa.h); a Python process cannot, so a child interpreter asks ``_core`` which core the
    level wants and the variable is set here before ``_core`` loads: the same kernels, and bits, as the CLI's.
    Nothing happens where OPENBLAS_CORETYPE is set already."""
    if "OPENBLAS_CORETYPE" in _os.environ or _os.environ.get("AUTOROUND_CPP_PROBE"):
        return
    probe = "from autoround_cpp import _core; print(_core.openblas_core_to_set())"
    r = _subprocess.run([_sys.executable, "-c", probe], env={**_os.environ, "AUTOROUND_CPP_PROBE": "1"},
                        capture_output=True, text=True, check=False)
    core = r.stdout.strip()
    if r.returncode == 0 and core:
        _os.environ["OPENBLAS_CORETYPE"] = core


_set_openblas_core()

from ._core import version as __version__  # noqa: E402
from .autoround import AutoRound
from .errors import (AutoRoundError, EngineIOError, InternalError, InvalidInputError, UnsupportedError,
                     UsageError)
from .evaluation import evaluate, logits

__all__ = ["AutoRound", "evaluate", "logits", "AutoRoundError", "UsageError", "InvalidInputError",
           "UnsupportedError", "EngineIOError", "InternalError", "__version__"]
