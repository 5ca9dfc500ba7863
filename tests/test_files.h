/* Reading a whole file, for the test programs that change a copy of a model or compare files. */
#ifndef SIFT_TEST_FILES_H
#define SIFT_TEST_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The bytes of the file at path in a malloc'd buffer, *size of them (an empty file gives a buffer
 * of none), or NULL where it cannot be opened or memory runs out. */
static inline uint8_t *test_read_file(const char *path, size_t *size)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 65536;
            uint8_t *d = realloc(data, cap);
            if (!d) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = d;
        }
        const size_t got = fread(data + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *size = n;
    return data;
}

#endif
