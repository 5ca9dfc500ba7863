/* The shared library against its header and the build: sift_version() (linked from libsift.so)
 * must be SIFT_VERSION_STRING, the string must be SIFT_VERSION_MAJOR.MINOR.PATCH, and both must be
 * the project version Meson builds (argv[1]). */
#include <sift.h>

#include "report.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: sift-version-test PROJECT_VERSION\n");
        return 2;
    }
    char composed[64];
    snprintf(composed, sizeof composed, "%d.%d.%d", SIFT_VERSION_MAJOR, SIFT_VERSION_MINOR, SIFT_VERSION_PATCH);
    test_case_begin("version", "host");
    test_check(!strcmp(sift_version(), SIFT_VERSION_STRING), "host", "sift_version() %s, header %s", sift_version(),
               SIFT_VERSION_STRING);
    test_check(!strcmp(composed, SIFT_VERSION_STRING), "host", "the macros give %s, the string is %s", composed,
               SIFT_VERSION_STRING);
    test_check(!strcmp(argv[1], SIFT_VERSION_STRING), "host", "meson builds %s, the header says %s", argv[1],
               SIFT_VERSION_STRING);
    return test_summary("version", "host");
}
