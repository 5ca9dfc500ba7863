/* The emulator build (cuda/emu/run-tests.sh) compiles the .cu files with only cuda/ on the include
 * path; engine/backend.h's #include "sift.h" then lands here. Meson builds find include/sift.h
 * first. Delete once that script puts include/ on the path. */
#include "../include/sift.h"
