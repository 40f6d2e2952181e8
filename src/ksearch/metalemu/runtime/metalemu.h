// ksearch Metal emulation: everything a translated Metal kernel sees (in place of <metal_stdlib> and MLX's preamble).
#pragma once
#define __METAL_VERSION__ 320
#define __METAL__ 1
#include "ks_entry.h"
using namespace metal;
