"""The tuned model as a GGUF file: the base GGUF copied whole, the adapted tensors replaced by their merged weights.

llama.cpp then serves the tuned model through the same path as the base one (``generate.llamacpp.model_path``;
``weights: q8_0`` re-quantizes it once for the fast CPU kernels). A merged tensor is the base tensor dequantized
(``gguf.quants.dequantize``) plus the adapter's update, stored as float32; every other tensor and every metadata
field is copied as it is (the writer follows ``gguf-py``'s ``gguf_new_metadata`` copy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np


def write_merged(*, base: str | Path, out: str | Path, deltas: Mapping[str, np.ndarray], name: str) -> dict:
    """Write ``out``: ``base`` with each tensor named in ``deltas`` (GGUF tensor name -> float32 update of the
    dequantized weight's shape) replaced by weight + update (float32). Returns what was merged."""
    import gguf

    reader = gguf.GGUFReader(str(base))
    arch = reader.fields["general.architecture"].contents()
    missing = sorted(set(deltas) - {t.name for t in reader.tensors})
    if missing:
        raise ValueError(f"{base}: no tensor {missing[0]} to merge the adapter into")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.NAME:
            writer.add_key_value(field.name, name, gguf.GGUFValueType.STRING)
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    data = {}
    for t in reader.tensors:
        if t.name in deltas:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            upd = np.asarray(deltas[t.name], dtype=np.float32)
            if upd.shape != w.shape:
                raise ValueError(f"{t.name}: update of shape {upd.shape}, weight of shape {w.shape}")
            arr = np.ascontiguousarray(w + upd)
            data[t.name] = arr
            writer.add_tensor_info(t.name, arr.shape, arr.dtype, arr.nbytes, gguf.GGMLQuantizationType.F32)
        else:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(data.get(t.name, t.data), tensor_endianess=reader.endianess)
    writer.close()
    tmp.replace(out)
    return {"merged_tensors": len(deltas), "bytes": out.stat().st_size}
