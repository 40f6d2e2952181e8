// ksearch: MSL's scalar type names on a 64-bit host C++ compiler (LP64: long is 64 bits, as in MSL).
// One copy for both users: the MSL syntax-check shim (msl_shim.h, next to this file) and the Metal emulation's
// runtime types (metalemu/runtime/ks_types.h includes it by its path relative to that file). Declarations only.
#pragma once

typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
