"""The MSL translation unit that `mx.fast.metal_kernel` generates, character for character (MLX 0.32:
mlx/backend/common/metal_kernel.cpp, `write_signature`, `write_template`, `make_template_hash` and the kernel name of
the call). Pure functions of names, dtypes and sizes: no arrays, no MLX import.

What MLX does, and so what this does:
- a parameter for each Metal attribute whose name occurs anywhere in the body (a substring search, in MLX's order);
- `<input>_shape` / `_strides` / `_ndim` parameters for an input with ndim > 0 whose name + suffix occurs in the body;
- inputs of fewer than 8 elements in the `constant` address space, 0-d inputs as `const constant T&`;
- outputs `device T*` (`device atomic<T>*` with atomic_outputs), buffers numbered in that order;
- template arguments as a real `template <...>` with an explicit instantiation named by [[host_name]];
- the kernel name: custom_kernel_<name>[_<template hash>] + one _<type> per input (s: 0-d, c: constant) and output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ksearch.backends.msl import MSL_TYPES

#: Metal attributes MLX adds as parameters when their name occurs in the body, in MLX's order, with their types.
ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)

#: Inputs with fewer elements than this are passed in the constant address space.
MAX_CONSTANT_ARRAY_SIZE = 8

#: MLX dtype name -> the type MLX writes into the signature (`get_type_string`).
TYPE_STRINGS = MSL_TYPES


def type_string(dtype: str) -> str:
    try:
        return TYPE_STRINGS[dtype]
    except KeyError:
        raise ValueError(f"Unsupported compilation type {dtype}") from None


@dataclass(frozen=True)
class TemplateArg:
    """One template argument: an int, a bool (written 1 / 0, as C++ streams write it) or a dtype (its MLX name)."""

    name: str
    kind: Literal["int", "bool", "dtype"]
    value: int | str

    @property
    def param_type(self) -> str:
        return {"int": "int", "bool": "bool", "dtype": "typename"}[self.kind]

    @property
    def text(self) -> str:
        if self.kind == "dtype":
            return type_string(str(self.value))
        return str(int(self.value))


@dataclass(frozen=True)
class InputInfo:
    """What the signature needs to know of one input array."""

    dtype: str  # MLX dtype name
    ndim: int
    size: int

    @property
    def is_scalar(self) -> bool:
        return self.ndim == 0

    @property
    def is_constant(self) -> bool:
        return self.size < MAX_CONSTANT_ARRAY_SIZE


@dataclass(frozen=True)
class ShapeInfo:
    shape: bool
    strides: bool
    ndim: bool


def shape_infos(source: str, input_names: Sequence[str]) -> list[ShapeInfo]:
    """Which of <name>_shape, _strides, _ndim each input's name + suffix occurs in the body (a substring search)."""
    return [ShapeInfo(f"{n}_shape" in source, f"{n}_strides" in source, f"{n}_ndim" in source) for n in input_names]


def attributes(source: str) -> list[str]:
    return [f"  {kind} {attr} [[{attr}]]" for attr, kind in ATTRIBUTES if attr in source]


def write_template(template: Sequence[TemplateArg]) -> str:
    return "<" + ", ".join(t.text for t in template) + ">"


def make_template_hash(template_def: str) -> str:
    """'<8, float>' -> '_8_float': angle brackets and ', ' become '_', the last character is dropped."""
    out: list[str] = []
    i = 0
    while i < len(template_def):
        c = template_def[i]
        if c in "<>":
            out.append("_")
        elif c == "," and i + 1 < len(template_def) and template_def[i + 1] == " ":
            out.append("_")
            i += 1
        else:
            out.append(c)
        i += 1
    return "".join(out)[:-1]


def kernel_name(name: str, template: Sequence[TemplateArg], inputs: Sequence[InputInfo],
                output_dtypes: Sequence[str]) -> str:
    out = "custom_kernel_" + name
    if template:
        out += "_" + make_template_hash(write_template(template))
    for info in inputs:
        out += "_" + type_string(info.dtype)
        if info.is_scalar:
            out += "s"
        elif info.is_constant:
            out += "c"
    for dtype in output_dtypes:
        out += "_" + type_string(dtype)
    return out


def write_signature(func_name: str, header: str, source: str, input_names: Sequence[str],
                    inputs: Sequence[InputInfo], output_names: Sequence[str], output_dtypes: Sequence[str],
                    template: Sequence[TemplateArg], attrs: Sequence[str], infos: Sequence[ShapeInfo],
                    atomic_outputs: bool) -> str:
    parts = [header]
    if template:
        parts.append("template <" + ", ".join(f"{t.param_type} {t.name}" for t in template) + ">\n")
    parts.append(f"[[kernel]] void {func_name}(\n")
    index = 0
    for name, info, shp in zip(input_names, inputs, infos, strict=True):
        location = "constant" if info.is_constant else "device"
        ref = "&" if info.is_scalar else "*"
        parts.append(f"  const {location} {type_string(info.dtype)}{ref} {name} [[buffer({index})]],\n")
        index += 1
        if info.ndim > 0:
            if shp.shape:
                parts.append(f"  const constant int* {name}_shape [[buffer({index})]],\n")
                index += 1
            if shp.strides:
                parts.append(f"  const constant int64_t* {name}_strides [[buffer({index})]],\n")
                index += 1
            if shp.ndim:
                parts.append(f"  const constant int& {name}_ndim [[buffer({index})]],\n")
                index += 1
    for name, dtype in zip(output_names, output_dtypes, strict=True):
        type_text = type_string(dtype)
        if atomic_outputs:
            type_text = f"atomic<{type_text}>"
        parts.append(f"  device {type_text}* {name} [[buffer({index})]]")
        # MLX compares the buffer index (which counts the shape parameters too) with the number of inputs and
        # outputs; kept as it is, so that the same arguments give the same text.
        if index < len(inputs) + len(output_names) - 1 or attrs:
            parts.append(",\n")
        else:
            parts.append(") {\n")
        index += 1
    for i, attr in enumerate(attrs):
        parts.append(attr + (",\n" if i < len(attrs) - 1 else ") {\n"))
    parts.append(source)
    parts.append("\n}\n")
    return "".join(parts)


def generate(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str, header: str,
             inputs: Sequence[InputInfo], output_dtypes: Sequence[str], template: Sequence[TemplateArg],
             atomic_outputs: bool) -> tuple[str, str]:
    """(the kernel's host name, the complete translation unit) as MLX writes them for one call."""
    func = kernel_name(name, template, inputs, output_dtypes)
    text = write_signature(func, header, source, input_names, inputs, output_names, output_dtypes, template,
                           attributes(source), shape_infos(source, input_names), atomic_outputs)
    if template:
        inst = func + write_template(template)
        text += f'\ntemplate [[host_name("{func}")]] [[kernel]] decltype({inst}) {inst};\n'
    return func, text
