// cuda.h for the minisgl CPU emulator: everything lives in emu_cuda.h.
#pragma once
#include "emu_cuda.h"
