"""Test helper: the MSL source `mx.fast.metal_kernel` generates around a body (MLX 0.32's write_signature: inputs
with fewer than 8 elements in `constant`, 0-d inputs by reference, `<name>_shape/_strides/_ndim` when the body
mentions them, outputs as `device T*` or `device atomic<T>*`, then the Metal attributes the body names, and an
explicit instantiation with a host name when there are template arguments), plus the buffers to pass."""

from __future__ import annotations

from typing import Any

import numpy as np

ATTRIBUTES = [
    ("dispatch_quadgroups_per_threadgroup", "uint"), ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"), ("grid_origin", "uint3"), ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"), ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"), ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"), ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"), ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"), ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"), ("threadgroups_per_grid", "uint3"), ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"), ("threads_per_threadgroup", "uint3"),
]
MSL_TYPES = {"float32": "float", "float16": "float16_t", "bfloat16": "bfloat16_t", "int32": "int32_t",
             "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "int8": "int8_t", "uint8": "uint8_t",
             "int16": "int16_t", "uint16": "uint16_t", "bool": "bool"}


def msl_type(dtype: Any) -> str:
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return MSL_TYPES[name]


def mlx_source(name: str, inputs: dict[str, np.ndarray], outputs: dict[str, Any], body: str, header: str = "",
               template: list[tuple[str, Any]] | None = None, atomic: bool = False) -> tuple[str, str]:
    """(source, host name). `outputs` maps output names to dtypes; template values are bool, int or dtype name."""
    template = template or []
    kname = "custom_kernel_" + name
    if template:
        args = [str(int(v)) if isinstance(v, bool) else str(v) if isinstance(v, int) else msl_type(v)
                for _, v in template]
        tdef = "<" + ", ".join(args) + ">"
        kname += "_" + "_".join(args)
    for arr in inputs.values():
        kname += "_" + msl_type(arr.dtype) + ("s" if arr.ndim == 0 else "c" if arr.size < 8 else "")
    for dt in outputs.values():
        kname += "_" + msl_type(dt)
    src = header
    if template:
        kinds = ["bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "typename" for _, v in template]
        src += "template <" + ", ".join(f"{k} {n}" for k, (n, _) in zip(kinds, template, strict=True)) + ">\n"
    params = []
    idx = 0
    for n, arr in inputs.items():
        loc = "constant" if arr.size < 8 else "device"
        params.append(f"  const {loc} {msl_type(arr.dtype)}{'&' if arr.ndim == 0 else '*'} {n} [[buffer({idx})]]")
        idx += 1
        if arr.ndim > 0:
            for suffix, decl in (("_shape", "const constant int*"), ("_strides", "const constant int64_t*"),
                                 ("_ndim", "const constant int&")):
                if n + suffix in body:
                    params.append(f"  {decl} {n}{suffix} [[buffer({idx})]]")
                    idx += 1
    for n, dt in outputs.items():
        t = msl_type(dt)
        params.append(f"  device {'atomic<' + t + '>' if atomic else t}* {n} [[buffer({idx})]]")
        idx += 1
    params += [f"  {t} {a} [[{a}]]" for a, t in ATTRIBUTES if a in body]
    src += f"[[kernel]] void {kname}(\n" + ",\n".join(params) + ") {\n" + body + "\n}\n"
    if template:
        td = kname + tdef
        src += f'\ntemplate [[host_name("{kname}")]] [[kernel]] decltype({td}) {td};\n'
    return "#include <metal_stdlib>\nusing namespace metal;\n\n" + src, kname


def mlx_buffers(inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray], body: str) -> list[np.ndarray]:
    """The buffers in [[buffer(i)]] order: each input, its shape/strides/ndim when used, then the outputs."""
    bufs: list[np.ndarray] = []
    for n, arr in inputs.items():
        bufs.append(np.ascontiguousarray(arr))
        if arr.ndim > 0:
            if n + "_shape" in body:
                bufs.append(np.array(arr.shape, np.int32))
            if n + "_strides" in body:
                bufs.append(np.array([s // arr.itemsize for s in arr.strides], np.int64))
            if n + "_ndim" in body:
                bufs.append(np.array(arr.ndim, np.int32))
    return bufs + list(outputs.values())
