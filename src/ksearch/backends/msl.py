"""What MLX writes for a dtype in a Metal kernel's text (`get_type_string` of MLX's Metal backend): the signature's
types, the template arguments' types, and the library's constants (`kernel_text.metal_constant_lines`)."""

from __future__ import annotations

#: MLX dtype name -> the MSL type name MLX writes (float16_t and bfloat16_t are typedefs of MLX's Metal headers).
MSL_TYPES: dict[str, str] = {
    "float32": "float", "float16": "float16_t", "bfloat16": "bfloat16_t", "float64": "double",
    "complex64": "complex64_t", "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
}
