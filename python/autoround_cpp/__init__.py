"""autoround.cpp from Python: AutoRound's API on the native engine, in-process, without torch.

    from autoround_cpp import AutoRound
    ar = AutoRound("Qwen/Qwen3-0.6B", scheme="W4A16")
    ar.quantize_and_save(output_dir="./qmodel", format="auto_round")

    import autoround_cpp
    autoround_cpp.evaluate("./qmodel", ref_model="Qwen/Qwen3-0.6B", text="eval.txt")  # {'ppl': ..., 'kl_mean': ...}
"""

from ._core import version as __version__
from .autoround import AutoRound
from .errors import (AutoRoundError, EngineIOError, InternalError, InvalidInputError, UnsupportedError,
                     UsageError)
from .evaluation import evaluate, logits

__all__ = ["AutoRound", "evaluate", "logits", "AutoRoundError", "UsageError", "InvalidInputError",
           "UnsupportedError", "EngineIOError", "InternalError", "__version__"]
