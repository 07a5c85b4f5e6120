// cuda_bf16.h for the minisgl CPU emulator: both 16-bit float types live in emu_half.h.
#pragma once
#include "emu_half.h"
