/* Engine-private declarations shared by the engine's own files (never by backends). */
#ifndef SIFT_ENGINE_H
#define SIFT_ENGINE_H

#include "backend.h"

const sift_backend_vtable *sift_context_vtable(const sift_context *ctx, void **be);

#endif
