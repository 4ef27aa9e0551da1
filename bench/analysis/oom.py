"""What a CUDA out-of-memory error says of itself. PyTorch's message names the request, the memory free on the GPU and
what its caching allocator held reserved but unallocated:

    read("... Tried to allocate 18.80 GiB. GPU 0 has a total capacity of 139.80 GiB of which 1.73 GiB is free. ...
          and 17.97 GiB is reserved by PyTorch but unallocated. ...")   -> Oom(asked_mib=19251, free_mib=1772, ...)
    words(reason)    # '' or 'fragmentation, not capacity: ...', for the fit's terminal line and its report

Fragmentation, not capacity: the allocator's cache held more than was free, and cache and free memory together would
have held the request, so the GPU had the room but no block of that size. On an H200 the 134m transformer's fit trials
fit batches 148-154 (their two steps), and the measured runs there (ten warm-up steps) ran out asking 18.1-18.8 GiB for
the logits with 16.7-18.0 GiB reserved but unallocated and 1.7-7.1 GiB free; the trials that ran out at 155-256 held
0.06-0.22 GiB unallocated: capacity. PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
grow a segment instead of splitting cached blocks, which is what such a run needs; the suite names it and leaves the
allocator as the user runs it. Messages of other forms (before torch 2.1, XPU, MPS) read as None: no words, never a
guess. The first clause decides a near miss: the trial at 155 held 0.19 GiB unallocated beside 18.80 GiB free against
18.92 GiB asked, capacity by it, though the two together would have held it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from bench.forecast.memory import budget_text

_UNITS = {"bytes": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
_SIZE = r"([0-9.]+) (bytes|KiB|MiB|GiB)"
_ASKED = re.compile(r"Tried to allocate " + _SIZE)
_FREE = re.compile(r"of which " + _SIZE + r" is free")
_UNALLOCATED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


@dataclass(frozen=True)
class Oom:
    """One CUDA out-of-memory error's figures, MiB."""
    asked_mib: float
    free_mib: float
    unallocated_mib: float

    @property
    def fragmented(self) -> bool:
        """The allocator's cache held more than was free, and the two together would have held the request."""
        return self.unallocated_mib > self.free_mib and self.unallocated_mib + self.free_mib >= self.asked_mib


def _mib(m) -> float:
    return float(m.group(1)) * _UNITS[m.group(2)]


def read(reason: str) -> Optional[Oom]:
    """The figures of PyTorch's CUDA out-of-memory message in `reason`, or None where it has not all three."""
    found = [p.search(reason or "") for p in (_ASKED, _FREE, _UNALLOCATED)]
    return Oom(*(_mib(m) for m in found)) if all(found) else None


def words(reason: str, hint: bool = True) -> str:
    """'fragmentation, not capacity: 17.97 GiB reserved but unallocated and 1.73 GiB free against 18.80 GiB asked;
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True may fit it' (without `hint`, the figures alone), or '' where the
    error is not that."""
    o = read(reason)
    if o is None or not o.fragmented:
        return ""
    return (f"fragmentation, not capacity: {budget_text(o.unallocated_mib)} reserved but unallocated and {budget_text(o.free_mib)} "
            f"free against {budget_text(o.asked_mib)} asked" + (f"; {HINT}" if hint else ""))


HINT = f"{EXPANDABLE} may fit it"
